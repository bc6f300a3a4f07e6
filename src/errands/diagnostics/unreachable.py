"""Why a server database refused or never answered a connection, and the exact fix.

A driver's message says what happened ("database "shop" does not exist", "Connection refused");
a person needs what to do about it, with their own host, port, user and database filled in.  Each
dialect's facts module lists its cases as :class:`Cause` entries beside its other SQL and
commands; this module matches the driver's text against them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from .commands import command


@dataclass(frozen=True)
class Cause:
    """One way a connection fails: a pattern over the driver's message, what it means and the fix.

    ``means`` and ``fix`` are ``str.format`` templates over ``host``, ``port``, ``user``,
    ``database`` (from the URL) and ``found`` (the pattern's first group, when it has one).
    ``configuration``: the server answered that the database or the role does not exist (MySQL's
    "access denied" says so for an unknown user, and for a wrong password alike), which no retry
    fixes, so the command line exits 78 rather than 3 ("try again later").  A server that did not
    answer (refused, unresolved, timed out) may be back soon; a refused password or pg_hba.conf
    line is left among those too, as a credential or rule being rolled out can start working
    without errands being restarted."""

    pattern: str
    means: str
    fix: str
    configuration: bool = False


@dataclass(frozen=True)
class Explained:
    means: str
    fix: str
    configuration: bool = False


def url_parts(url: str, default_port: int) -> dict[str, str]:
    """host, port, user and database of a server URL, for messages (never the password).  With a host
    list (``h1:3411,h2:3412``) ``host`` and ``port`` are comma-separated lists, as libpq's tools take
    them (``pg_isready -h h1,h2 -p 3411,3412``); ``address`` names every node as ``host:port``."""
    parts = urlsplit(url)
    nodes = [_node(entry, default_port) for entry in parts.netloc.rpartition("@")[2].split(",")]
    return {"host": ",".join(h for h, _ in nodes), "port": ",".join(p for _, p in nodes),
            "address": ", ".join(f"{h}:{p}" for h, p in nodes),
            "user": unquote(parts.username or ""), "database": unquote(parts.path.lstrip("/").split("?")[0])}


def _node(entry: str, default_port: int) -> tuple[str, str]:
    """One ``host[:port]`` of a netloc's host list, leniently (a message must not fail on a bad port)."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:]
    else:
        host, _, port = entry.partition(":")
    return unquote(host) or "localhost", port or str(default_port)


def explain(causes: tuple[Cause, ...], message: str, url: str, default_port: int) -> Explained | None:
    """The first cause whose pattern matches ``message``, filled in; None when none does."""
    for cause in causes:
        match = re.search(cause.pattern, message, re.IGNORECASE)
        if match:
            fields = {**url_parts(url, default_port), "found": match.group(1) if match.groups() else "",
                      "migrate": command("migrate")}
            return Explained(cause.means.format(**fields), cause.fix.format(**fields), cause.configuration)
    return None
