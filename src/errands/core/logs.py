"""Logging set-up for the command line: the standard ``logging`` module, as text or one JSON object a line.

JSON lines are for log shippers (Loki, Elasticsearch, CloudWatch): every record becomes
``{"time", "level", "logger", "message", "process", ...}`` plus whatever the record carries in
``extra`` (job lines carry ``job_id``, ``job_name``, ``queue``, ``attempt``, ``duration_ms``), and the
traceback as ``exception`` when there is one.  Applications that configure logging themselves
can use :class:`JsonFormatter` on their own handlers.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

FORMATS = ("text", "json")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record; values JSON cannot encode are written with ``str()``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s [%(process)d] %(message)s"
"""The text format of every line errands writes itself (the CLI, manage.py errands_worker, embedded workers)."""


def _handler(fmt: str) -> logging.Handler:
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT, datefmt="%H:%M:%S"))
    return handler


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Route errands' loggers (and the root logger) to stderr in the chosen format."""
    logging.basicConfig(level=level.upper(), handlers=[_handler(fmt)])


def ensure_errands_output(level: str = "INFO") -> bool:
    """Give the ``errands`` logger a stderr handler when nothing would print its lines; True if it did.

    A host that runs errands inside itself (uvicorn, ``flask run``, ``manage.py``) configures its
    own loggers and often not the root logger: errands' INFO lines (a worker's start, each job
    done) then reach only Python's last-resort handler, which prints warnings and worse.  When the
    ``errands`` logger or one of its ancestors has a handler, the host decided where the lines go,
    and this leaves it alone.  The handler does not propagate to the root logger, so a root
    handler added later does not print every line (and traceback) twice."""
    logger = logging.getLogger("errands")
    if logger.hasHandlers():
        return False
    logger.addHandler(_handler("text"))
    logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(level.upper())
    return True
