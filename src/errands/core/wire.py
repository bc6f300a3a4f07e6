"""The wire format: what a program that is not errands writes to enqueue a job (docs/wire-format.md).

Any language, ``psql``, the ``mysql`` client, ``sqlite3`` or a trigger on the user's own tables
enqueues through the database entry point ``errands migrate`` creates: ``<prefix>enqueue``, a
function on PostgreSQL, a stored procedure on MySQL/MariaDB, a view with an ``INSTEAD OF INSERT``
trigger on SQLite (each dialect's ``_sql_enqueue`` migration section).  It takes the parameters
below, in this order, checks them as the Python enqueue does, writes the payload
``{"args": [...], "kwargs": {...}}`` (:mod:`errands.core.payload` reads it back) and honours a
unique key as the Python enqueue's default rule does.

:data:`WIRE_VERSION` is the contract's version: a change that an outside writer would notice (a
parameter renamed or removed, a payload key that means something else) is a new version, and a
new entry point beside the old one; adding an optional parameter at the end is not.
"""

from __future__ import annotations

from typing import NamedTuple

from .jobs import PRIORITY_RANGE, UNIQUE_KEY_MAX
from .limits import INT_MAX, MAX_DELAY
from .settings import AppOptions

WIRE_VERSION = 1
"""The version of the wire format and of the ``<prefix>enqueue`` entry point's parameters."""

ENTRY_POINT = "enqueue"
"""The entry point's name after the store's table prefix: ``errands_enqueue`` by default."""

DEFAULT_QUEUE = AppOptions.default_queue
DEFAULT_MAX_ATTEMPTS = AppOptions.max_attempts
NAME_MAX = 255
"""Characters of a job name (the ``name`` column)."""
QUEUE_MAX = 60
MIN_PRIORITY, MAX_PRIORITY = PRIORITY_RANGE
DELAY_MAX = MAX_DELAY
ATTEMPTS_MAX = INT_MAX
KEY_MAX = UNIQUE_KEY_MAX


class WireParameter(NamedTuple):
    """One parameter of the entry point, as docs/wire-format.md's table shows it."""

    name: str
    default: str
    """The default as the docs show it (NULL passed for a parameter means this default too)."""
    meaning: str


PARAMETERS: tuple[WireParameter, ...] = (
    WireParameter("name", "(required)", f"the registered job name, 1 to {NAME_MAX} characters"),
    WireParameter("args", "[]", "the positional arguments: a JSON array"),
    WireParameter("kwargs", "{}", "the keyword arguments: a JSON object"),
    WireParameter("queue", DEFAULT_QUEUE, f"1 to {QUEUE_MAX} letters, digits, '-', '_' or '.'"),
    WireParameter("priority", "0", "a 32-bit integer; higher runs first"),
    WireParameter("delay", "0", f"seconds from now (the database's clock) before it may run, 0 to {DELAY_MAX:.0f}"),
    WireParameter("unique_key", "NULL", f"1 to {KEY_MAX} characters: while a job holding it waits or runs, "
                                        "no second job is stored and the holder's id is returned"),
    WireParameter("max_attempts", str(DEFAULT_MAX_ATTEMPTS), f"attempts before the dead letter, 1 to {ATTEMPTS_MAX}"),
    WireParameter("timeout", "NULL", f"seconds an attempt may run, over 0 and up to {DELAY_MAX:.0f}; NULL: none"),
)
"""The entry point's parameters, in order (PostgreSQL: also by name; MySQL: all positional, then
``OUT id``; SQLite: the view's columns)."""

QUEUE_REFUSAL = (f"queue must be 1 to {QUEUE_MAX} letters, digits, '-', '_' or '.' (not '.' or '..')")
"""Messages the entry point raises, the same words on every database (each begins with the entry
point's name and a colon)."""
REFUSALS = {
    "name": f"name must be a non-empty text of at most {NAME_MAX} characters",
    "args": "args must be a JSON array",
    "kwargs": "kwargs must be a JSON object",
    "queue": QUEUE_REFUSAL,
    "priority": "priority must be a 32-bit integer",
    "delay": f"delay must be 0 to {DELAY_MAX:.0f} seconds",
    "unique_key": f"unique_key must be a non-empty text of at most {KEY_MAX} characters",
    "max_attempts": f"max_attempts must be an integer from 1 to {ATTEMPTS_MAX}",
    "timeout": f"timeout must be over 0 and at most {DELAY_MAX:.0f} seconds",
}
