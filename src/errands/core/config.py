"""Where settings come from, in one place: explicit argument, ERRANDS_* variable, default."""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from .errors import InvalidQueueName

DEFAULT_DATABASE_URL = "sqlite:///errands.db"
QUEUE_NAME = re.compile(r"[A-Za-z0-9._-]{1,60}")
"""The queue-name alphabet: ASCII letters, digits, '.', '_' and '-', 1 to 60 of them (matched whole:
``$`` would let a final newline through).  "." and ".." are refused too: in a URL path (the
dashboard's buttons post to /queues/NAME/pause) a browser resolves them to another page."""


def database_url(explicit: str | None = None) -> str:
    """Explicit URL, then ``ERRANDS_DATABASE_URL``, then ``DATABASE_URL``, then a local SQLite file."""
    return (explicit or os.environ.get("ERRANDS_DATABASE_URL") or os.environ.get("DATABASE_URL")
            or DEFAULT_DATABASE_URL)


def read_url(explicit: str | None = None) -> str | None:
    """The read replica's URL: explicit, then ``ERRANDS_READ_URL`` (empty counts as unset), else None.
    Read where ``ERRANDS_DATABASE_URL`` is, so that ``errands status`` and the dashboard on a bare URL
    find the replica too; ``?read_url=`` in the database URL wins over both (``store/replicas.py``)."""
    return explicit or os.environ.get("ERRANDS_READ_URL", "").strip() or None


NESTED_URLS = ("listen_url", "read_url")
"""Query options whose value is a database URL of its own (percent-encoded), password and all."""


def mask_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for banners and logs), also the password of a
    URL nested in its query (``?listen_url=``, ``?read_url=``).  A text ``urlsplit`` cannot read (an
    unclosed ``[``) has whatever sits between ``://`` and the last ``@`` masked but the user name."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"(://[^:/@]*:)[^/]*@", r"\1***@", url)
    if "listen_url=" in parts.query or "read_url=" in parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        pairs = [(k, mask_url(v) if k in NESTED_URLS else v) for k, v in pairs]
        parts = parts._replace(query=urlencode(pairs, quote_via=quote, safe="*"))
        url = urlunsplit(parts)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    userinfo = netloc[0].split(":", 1)[0] + ":***"
    return urlunsplit(parts._replace(netloc=userinfo + "@" + netloc[1]))


def same_database(a: str, b: str) -> bool:
    """Whether two URLs name one database: scheme, host and path alike (options in the query aside);
    SQLite paths compared as absolute paths (``sqlite:///shop.db`` is ``./shop.db``)."""
    if a == b:
        return True
    pa, pb = urlsplit(a), urlsplit(b)
    if pa.scheme.lower() == pb.scheme.lower() == "sqlite":
        return _sqlite_file(pa.path) == _sqlite_file(pb.path)
    return (pa.scheme.lower(), pa.netloc, pa.path) == (pb.scheme.lower(), pb.netloc, pb.path)


def _sqlite_file(path: str) -> str:
    path = path[1:] if path.startswith("/") else path
    return path if path in ("", ":memory:") else os.path.abspath(path)


def check_queue_name(name: object) -> str:
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidQueueName(f"invalid queue name {name!r}: use 1-60 letters, digits, '-', '_' or '.' "
                               "(not '.' or '..')")
    return name
