"""DATABASES entries from the URLs the test fixtures hand out (sqlite:///, postgresql://, mysql://)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


def database_from_url(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parts.path[1:],
                "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30,
                            "init_command": "PRAGMA journal_mode=WAL;"}}
    engine = {"postgresql": "django.db.backends.postgresql", "mysql": "django.db.backends.mysql"}[parts.scheme]
    options: dict[str, Any] = {}
    if parts.scheme == "postgresql" and "options" in query:
        options["options"] = query["options"]
    return {"ENGINE": engine, "NAME": unquote(parts.path.lstrip("/")), "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""), "HOST": parts.hostname or "", "PORT": str(parts.port or ""),
            "OPTIONS": options}
