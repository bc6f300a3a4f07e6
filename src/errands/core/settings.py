"""Settings from where teams already keep them: ``[tool.errands]`` in pyproject.toml, ``ERRANDS_*``
variables, and the application's own settings object (Django settings, Flask config, a dict).

Two consumers read them:

* ``Errands.from_settings()`` builds an app.  Precedence, strongest first: keyword overrides,
  the settings object given, ``ERRANDS_*`` variables, ``[tool.errands]``, built-in defaults.
* The CLI turns ``[tool.errands]`` (and its ``worker`` / ``dashboard`` sub-tables) into click's
  ``default_map``, so a flag beats its ``ERRANDS_*`` variable, which beats the file, which
  beats the default — the order click documents.

The file is found by walking up from the current directory to the first ``pyproject.toml``
(``ERRANDS_CONFIG`` names another file; ``ERRANDS_CONFIG=none`` turns the lookup off).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypedDict

from .alerts import AlertThresholds, parse_per_queue
from .config import check_queue_name
from .errors import ConfigurationError
from .jobs import JobDefaults
from .limits import MAX_DELAY
from .retry import DEFAULT_MAX_SNOOZES, BackoffSpec, make_backoff
from .runlogs import RunLogLimits

DAY = 86400.0
DEFAULT_PAYLOAD_LIMIT = 64 * 1024
ENV_PREFIX = "ERRANDS_"

CLI_TOP_LEVEL = {"app": "app_path", "database-url": "database_url", "log-level": "log_level",
                 "log-format": "log_format"}
"""``[tool.errands]`` keys read by the ``errands`` command itself, and click's parameter names."""

_CODE_ONLY = MappingProxyType({"code_only": True})
"""An ``AppOptions`` field that only code passes: no settings source reads it (``eager`` and
``keep_traceback`` never were settings; making one a setting is a change of its own)."""


@dataclass(frozen=True)
class AppOptions:
    """Every option of ``Errands(...)``, declared once: its type, its default, what it means and its
    checks.  ``Errands(**options)`` builds one; :data:`DEFAULTS`, the settings sources' fields
    (``AppSettings``, ``ERRANDS_*``, ``[tool.errands]``) and ``AppOptionArgs`` (the keywords' types for
    mypy) are derived from these fields or checked against them, so an option is added here only.

    ``default_queue``, ``max_attempts``, ``backoff``, ``timeout`` and ``max_snoozes`` are the
    defaults of the app's jobs: a job's own ``@app.job(...)`` options win over them, and a call's
    ``.using(...)`` over those (:class:`errands.core.jobs.JobDefaults` applies that order, in one place).

    The ``alert_*`` options are the alert thresholds (:mod:`errands.core.alerts`), every one off by
    default."""

    database_url: str | None = None
    """Where the jobs live (None: ``ERRANDS_DATABASE_URL``, then ``DATABASE_URL``, then
    ``sqlite:///errands.db``)."""
    lease: float = 30.0
    """Seconds a claim holds without a heartbeat (at least 1)."""
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT
    """The largest JSON payload, in bytes."""
    table_prefix: str = "errands_"
    """The prefix of every table (two apps with other prefixes share a database apart)."""
    default_queue: str = "default"
    """The queue of jobs that name none."""
    keep_results: bool = False
    """Keep every job's return value (else only jobs with ``keep_result``)."""
    result_ttl: float = DAY
    """Seconds results and cancellation records are kept."""
    failed_ttl: float | None = 30 * DAY
    """Seconds dead-letter entries are kept (None: for ever)."""
    max_attempts: int = 3
    """Attempts of a job that sets none."""
    backoff: BackoffSpec = "exponential"
    """Backoff of a job that sets none: a name, seconds, a list of delays or a callable."""
    timeout: float | None = None
    """Seconds a run of a job that sets none may take (None: no limit)."""
    max_snoozes: int = DEFAULT_MAX_SNOOZES
    """Times a job that sets none may ``raise Snooze(...)``."""
    alert_dead_letter: int | None = None
    """Alert when the dead letter holds at least this many entries."""
    alert_oldest_ready: float | None = None
    """Alert when some queue's oldest ready job has waited this many seconds."""
    alert_oldest_ready_per_queue: Mapping[str, float] | None = None
    """The same per named queue: ``{"mails": 60}`` (``mails=60,reports=600`` as text)."""
    alert_no_worker: bool = False
    """Alert when no worker has sent a heartbeat lately."""
    alert_every: float = 30.0
    """Seconds between two evaluations of the alerts across the fleet (at least 1)."""
    unknown_job_grace: float = 600.0
    """Seconds after its enqueue a job whose name a worker does not register is held back (given back
    with its attempt refunded, for a worker that knows it) before the dead letter (0: at once)."""
    run_logs: bool = True
    """Keep the ``logging`` records each attempt emits in its own thread or task with the attempt, for the
    job page, ``errands job show`` and the API (:mod:`errands.core.runlogs`)."""
    run_log_records: int = 200
    """The most records kept per attempt (the latest)."""
    run_log_bytes: int = 64 * 1024
    """The most bytes of log text kept per attempt (the latest records)."""
    read_url: str | None = None
    """A read replica of the database (same kind; not SQLite) for the reads that may be a little old: the
    dashboard's lists and figures, ``errands status``, ``/metrics`` and the backlog (docs/read-replicas.md).
    ``?read_url=`` in the database URL wins over it.  Never used for a claim, a write or a read that must
    see its own writes."""
    read_max_lag: float = 10.0
    """Seconds the replica may lag behind before reads go back to the primary (more than 0).  Keep it well
    under the lease: a replica that many seconds behind shows heartbeats and leases that much older, so
    near the lease, running jobs and live workers would read as stale."""
    eager: bool = field(default=False, metadata=_CODE_ONLY)
    """Run jobs inline at enqueue (for tests; ``Errands.eager()`` for a block)."""
    keep_traceback: bool = field(default=False, metadata=_CODE_ONLY)
    """Keep each failed attempt's traceback (trimmed) in the error history."""

    def __post_init__(self) -> None:
        """The checks ``Errands(...)`` has always made, in the same order and with the same errors."""
        if self.result_ttl <= 0 or (self.failed_ttl is not None and self.failed_ttl <= 0):
            raise ConfigurationError("result_ttl and failed_ttl must be positive numbers of seconds")
        if self.payload_limit <= 0:
            raise ConfigurationError("payload_limit must be a positive number of bytes")
        if self.lease < 1:
            raise ConfigurationError("lease must be at least one second")
        if isinstance(self.unknown_job_grace, bool) or not isinstance(self.unknown_job_grace, (int, float)) \
                or not 0 <= self.unknown_job_grace <= MAX_DELAY:
            raise ConfigurationError(f"unknown_job_grace must be 0 to {MAX_DELAY:.0f} seconds, got "
                                     f"{self.unknown_job_grace!r}")
        check_queue_name(self.default_queue)
        if isinstance(self.read_max_lag, bool) or not isinstance(self.read_max_lag, (int, float)) \
                or not 0 < self.read_max_lag <= MAX_DELAY:
            raise ConfigurationError(f"read_max_lag must be more than 0 and at most {MAX_DELAY:.0f} seconds, got "
                                     f"{self.read_max_lag!r}")
        if self.read_url is not None and not isinstance(self.read_url, str):
            raise ConfigurationError(f"read_url must be a database URL, got {self.read_url!r}")
        _ = self.job_defaults, self.alert_thresholds, self.run_log_limits  # each checks its own values

    @cached_property
    def job_defaults(self) -> JobDefaults:
        """The defaults of the app's jobs (checked: ``ConfigurationError``)."""
        return JobDefaults(self.default_queue, self.max_attempts, self.backoff, self.timeout, self.max_snoozes)

    @cached_property
    def run_log_limits(self) -> RunLogLimits | None:
        """How much of each attempt's logging is kept (checked), None when ``run_logs`` is off."""
        limits = RunLogLimits(self.run_log_records, self.run_log_bytes)
        return limits if self.run_logs else None

    @cached_property
    def alert_thresholds(self) -> AlertThresholds:
        """The alert thresholds (checked: ``ConfigurationError``)."""
        return AlertThresholds(self.alert_dead_letter, self.alert_oldest_ready,
                               dict(self.alert_oldest_ready_per_queue or {}), bool(self.alert_no_worker),
                               float(self.alert_every))


class AppOptionArgs(TypedDict, total=False):
    """:class:`AppOptions`' fields as keyword arguments: ``Errands(url, **options: Unpack[AppOptionArgs])``,
    so mypy checks each option's name and type as it checked the old spelled-out signature (the
    names and annotations must equal AppOptions': tests/unit/test_option_declarations.py)."""

    database_url: str | None
    lease: float
    payload_limit: int
    table_prefix: str
    default_queue: str
    keep_results: bool
    result_ttl: float
    failed_ttl: float | None
    max_attempts: int
    backoff: BackoffSpec
    timeout: float | None
    max_snoozes: int
    alert_dead_letter: int | None
    alert_oldest_ready: float | None
    alert_oldest_ready_per_queue: Mapping[str, float] | None
    alert_no_worker: bool
    alert_every: float
    unknown_job_grace: float
    run_logs: bool
    run_log_records: int
    run_log_bytes: int
    read_url: str | None
    read_max_lag: float
    eager: bool
    keep_traceback: bool


@dataclass(frozen=True)
class AppSettings:
    """The settings found, by name (``settings.lease``); a setting no source gave reads as
    its default (:data:`DEFAULTS`)."""

    values: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        if name not in _FIELDS:
            raise AttributeError(name)
        if name in self.values:
            return self.values[name]
        return DEFAULTS[name]

    @classmethod
    def load(cls, source: Any = None, *, environ: Mapping[str, str] | None = None,
             pyproject: str | os.PathLike[str] | bool = True, **overrides: Any) -> AppSettings:
        """Merge every source (see the module docstring for the order) and check each value.

        ``source`` is a mapping or an object with attributes: keys either as the fields are
        named (``{"lease": 10}``) or prefixed (``ERRANDS_LEASE``, as in Django settings or a
        Flask config).  ``pyproject``: True looks the file up, a path reads that file, False
        skips it.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        file = find_pyproject(env) if pyproject is True else (Path(pyproject) if pyproject else None)
        if file is not None:
            table = read_tool_table(file)
            for key, value in table.items():
                name = key.replace("-", "_")
                if name in _FIELDS:
                    values[name] = _coerce(name, value, f"[tool.errands] {key} in {file}")
        for name in _FIELDS:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                values[name] = _coerce(name, raw, ENV_PREFIX + name.upper())
        values.update(_from_source(source))
        for name, value in overrides.items():
            if name not in _FIELDS:
                raise ConfigurationError(f"unknown setting {name!r}; known: {', '.join(sorted(_FIELDS))}")
            values[name] = _coerce(name, value, name)
        return cls(values)

    def as_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``Errands(...)``: only what a source gave."""
        return dict(self.values)


def _from_source(source: Any) -> dict[str, Any]:
    if source is None:
        return {}
    found: dict[str, Any] = {}
    for name in _FIELDS:
        for key in (name, ENV_PREFIX + name.upper()):
            if isinstance(source, Mapping):
                present, value = key in source, source.get(key)
            else:
                present, value = hasattr(source, key), getattr(source, key, None)
            if present:
                found[name] = _coerce(name, value, key)
    return found


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _as_bool(value: Any, text: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(text, str) and text.lower() in _TRUE:
        return True
    if isinstance(text, str) and text.lower() in _FALSE:
        return False
    raise ValueError("expected true or false")


def _as_int(value: Any, text: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("expected a whole number")
    return int(text)


def _as_float(value: Any, text: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number")
    return float(text)


def _as_str(value: Any, text: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return str(text)


def _as_backoff(value: Any, text: Any) -> Any:
    """A backoff as ``@app.job(backoff=...)`` takes it.  From text (a variable, a file): a name
    (``exponential``), seconds (``5``: fixed) or delays separated by commas (``1,5,30``)."""
    spec = value
    if isinstance(value, str):
        spec = text
        if "," in text:
            spec = [float(part) for part in text.split(",")]
        else:
            try:
                spec = float(text)
            except ValueError:
                spec = text
    try:
        make_backoff(spec)
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None
    return spec


def _as_per_queue(value: Any, text: Any) -> dict[str, float]:
    return parse_per_queue(text)


_READERS: dict[str, Callable[[Any, Any], Any]] = {
    "bool": _as_bool, "int": _as_int, "float": _as_float, "str": _as_str, "BackoffSpec": _as_backoff,
    "Mapping[str, float]": _as_per_queue}
"""How a settings source's value (often text: a variable, a file) is read, by the option's declared type
(an ``AppOptions`` field of a type missing here fails at import, not in a user's deployment)."""


def _settings_fields() -> dict[str, tuple[Callable[[Any, Any], Any], bool]]:
    found = {}
    for option in fields(AppOptions):
        if option.metadata.get("code_only"):
            continue
        declared = str(option.type)  # the annotation's text (``from __future__ import annotations``)
        found[option.name] = (_READERS[declared.removesuffix(" | None")], declared.endswith(" | None"))
    return found


_FIELDS = _settings_fields()
"""The options a settings source may give: (how its value is read, whether None is allowed), from
:class:`AppOptions`' fields (all but ``eager`` and ``keep_traceback``, which only code passes)."""

DEFAULTS: Mapping[str, Any] = MappingProxyType({option.name: option.default for option in fields(AppOptions)})
"""Every option's default, read from :class:`AppOptions` (their one home); read-only."""


def _coerce(name: str, value: Any, where: str) -> Any:
    """The value as the field's type; a clear error names where a bad value came from."""
    read, nullable = _FIELDS[name]
    text = str(value).strip() if isinstance(value, str) else value
    try:
        if value is None or (nullable and isinstance(text, str) and text.lower() in ("none", "null")):
            if nullable:
                return None
            raise ValueError("a value is required")
        return read(value, text)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{where}: {value!r} is not a valid {name} ({exc})") from None


# ------------------------------------------------------------------------------ pyproject.toml
def find_pyproject(environ: Mapping[str, str] | None = None, start: Path | None = None) -> Path | None:
    """``ERRANDS_CONFIG``, else the nearest pyproject.toml at or above ``start`` (the cwd)."""
    env = os.environ if environ is None else environ
    named = env.get("ERRANDS_CONFIG")
    if named:
        if named.lower() == "none":
            return None
        path = Path(named)
        if not path.is_file():
            raise ConfigurationError(f"ERRANDS_CONFIG names {named!r}, which is not a file")
        return path
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def read_tool_table(path: Path) -> dict[str, Any]:
    """The ``[tool.errands]`` table of a TOML file ({} when it has none)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 only: tomllib's backport, needed only when the file configures errands
        try:
            import tomli as tomllib
        except ImportError:
            if "[tool.errands" not in path.read_text(errors="replace"):
                return {}
            raise ConfigurationError(f"{path} configures errands; reading it on Python 3.10 needs tomli: "
                                     "pip install tomli") from None
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None
    table = document.get("tool", {}).get("errands", {})
    if not isinstance(table, dict):
        raise ConfigurationError(f"{path}: [tool.errands] must be a table")
    return table


def cli_default_map(path: Path | None, commands: Mapping[str, Any]) -> dict[str, Any]:
    """click's ``default_map`` from ``[tool.errands]``: top-level keys for the ``errands`` group,
    a sub-table per command (``[tool.errands.worker]``, ``[tool.errands.failed.list]``), keyed by
    the flags' long names.  Unknown keys are refused with the known ones listed, because a typo
    in a config file should not be silently ignored."""
    if path is None:
        return {}
    table = read_tool_table(path)
    defaults: dict[str, Any] = {}
    for key, value in table.items():
        if key in commands:
            defaults[key] = _command_defaults(path, key, value, commands[key])
        elif key in CLI_TOP_LEVEL:
            defaults[CLI_TOP_LEVEL[key]] = value
        elif key.replace("-", "_") not in _FIELDS:
            known = sorted([*CLI_TOP_LEVEL, *commands, *(f.replace("_", "-") for f in _FIELDS)])
            raise ConfigurationError(f"{path}: unknown key {key!r} in [tool.errands]; known: {', '.join(known)}")
    return defaults


def _command_defaults(path: Path, section: str, table: Any, command: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigurationError(f"{path}: [tool.errands.{section}] must be a table")
    subcommands = getattr(command, "commands", None)
    if subcommands is not None:  # a group: one sub-table per subcommand
        unknown = sorted(set(table) - set(subcommands))
        if unknown:
            raise ConfigurationError(f"{path}: unknown key {unknown[0]!r} in [tool.errands.{section}]; known: "
                                     f"{', '.join(sorted(subcommands))}")
        return {key: _command_defaults(path, f"{section}.{key}", value, subcommands[key])
                for key, value in table.items()}
    by_flag: dict[str, str] = {}
    for param in command.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--"):
                by_flag[opt[2:]] = param.name
    found: dict[str, Any] = {}
    for key, value in table.items():
        name = by_flag.get(key) or by_flag.get(key.replace("_", "-"))
        if name is None:
            raise ConfigurationError(f"{path}: unknown key {key!r} in [tool.errands.{section}]; known: "
                                     f"{', '.join(sorted(by_flag))}")
        found[name] = value
    return found
