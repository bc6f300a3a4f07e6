"""A job's shape: every column of the jobs table, declared once.

Each :class:`Column` says what a column holds (its :class:`Kind`, which each dialect maps to its
own SQL type), how an enqueue fills it, whether a claim returns it, whether the dead letter keeps
it, and whether a plain job leaves it at its default.  Everything that names job columns is made
from this list: the insert statements of every dialect (single, multi-row, ``unnest``, ``COPY``,
MySQL's bulk form), the claim's select list and :class:`~errands.core.rows.ClaimedJob`'s field
order, the move to the dead letter and back, the listings' select list, and the one decoder
that turns a row read by name into a :class:`~errands.core.rows.JobRow`.  A new job option that
is stored is one line here, its field on the row values in :mod:`errands.core.rows`, and a
migration per dialect (which takes the column's type from here).

The tests hold the values in :mod:`errands.core.rows` to this list (field names and order), so
the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(str, enum.Enum):
    """What a column holds; each dialect names its SQL type (``Dialect.column_type``)."""

    ID = "id"
    """A job id: 64-bit, issued by the jobs table's sequence."""
    BIGINT = "bigint"
    INT = "int"
    """32-bit."""
    FLOAT = "float"
    TIME = "time"
    """A moment, stored in UTC and compared with the database's clock."""
    QUEUE = "queue"
    """A queue name (at most 60 characters)."""
    OWNER = "owner"
    """A worker id (at most 120 characters)."""
    KEY = "key"
    """A short text: names, keys, labels (at most 255 characters)."""
    TEXT = "text"
    """Free text (error messages)."""
    PAYLOAD = "payload"
    """The JSON payload (MySQL: MEDIUMTEXT)."""


class Fill(str, enum.Enum):
    """How an enqueue writes a column (``None`` on a :class:`Column`: an enqueue leaves it alone)."""

    FIELD = "field"
    """The :class:`~errands.core.rows.NewJob` field of the same name."""
    ZERO = "zero"
    """0 (a new job has used no attempt)."""
    DUE = "due"
    """When it may run: ``run_at``, else the database's clock plus ``delay``."""
    NOW = "now"
    """The database's clock."""


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    fill: Fill | None = None
    """How an enqueue writes it; None: it starts NULL (or its DDL default) and later verbs set it."""
    feature: bool = False
    """Written by an enqueue only when some job of the batch sets it: a plain job leaves it at its
    default, so the plain insert, the hot path, names none of these columns."""
    claim: bool = False
    """Returned by a claim, in this order (the fields of ClaimedJob)."""
    dead: bool = False
    """Kept by the dead letter (``failed_jobs`` has it) and written back by a retry."""
    nullable: bool = True
    unreadable: int = 0
    """What a number column that holds no number (hand-written) reads as, for listings."""


JOBS: tuple[Column, ...] = (
    Column("id", Kind.ID, claim=True, dead=True, nullable=False),
    Column("queue", Kind.QUEUE, Fill.FIELD, claim=True, dead=True, nullable=False),
    Column("name", Kind.KEY, Fill.FIELD, claim=True, dead=True, nullable=False),
    Column("payload", Kind.PAYLOAD, Fill.FIELD, claim=True, dead=True, nullable=False),
    Column("priority", Kind.INT, Fill.FIELD, claim=True, dead=True, nullable=False),
    Column("attempts", Kind.INT, Fill.ZERO, claim=True, dead=True, nullable=False),
    Column("max_attempts", Kind.INT, Fill.FIELD, claim=True, dead=True, nullable=False),
    Column("timeout", Kind.FLOAT, Fill.FIELD, claim=True, dead=True),
    Column("available_at", Kind.TIME, Fill.DUE, nullable=False),
    Column("created_at", Kind.TIME, Fill.NOW, dead=True, nullable=False),
    Column("reserved_by", Kind.OWNER, claim=True),
    Column("reserved_at", Kind.TIME),
    Column("reserved_until", Kind.TIME),
    Column("last_error", Kind.TEXT),
    Column("unique_key", Kind.KEY, Fill.FIELD, feature=True, dead=True),
    Column("blocked_by", Kind.BIGINT, Fill.FIELD, feature=True),
    Column("batch_id", Kind.BIGINT, Fill.FIELD, feature=True, claim=True, dead=True),
    Column("concurrency_key", Kind.KEY, Fill.FIELD, feature=True, claim=True, dead=True),
    Column("flags", Kind.INT, Fill.FIELD, feature=True, claim=True, dead=True, nullable=False),
    Column("cancel_requested_at", Kind.TIME),
    Column("progress", Kind.FLOAT),
    Column("progress_message", Kind.KEY),
    Column("label", Kind.KEY, Fill.FIELD, feature=True, dead=True),
    Column("cost", Kind.INT, Fill.FIELD, feature=True, dead=True, unreadable=1),
    Column("admitted_at", Kind.TIME),
    Column("snoozes", Kind.INT, claim=True, nullable=False),
    Column("expires_at", Kind.TIME, Fill.FIELD, feature=True),
    Column("deadline_at", Kind.TIME, Fill.FIELD, feature=True),
    Column("rate_key", Kind.KEY, Fill.FIELD, feature=True, claim=True, dead=True),
    Column("age_after", Kind.FLOAT, Fill.FIELD, feature=True),
    Column("age_base", Kind.INT, Fill.FIELD, feature=True),
    Column("age_cap", Kind.INT, Fill.FIELD, feature=True),
    Column("fairness_key", Kind.KEY, Fill.FIELD, feature=True, dead=True),
    Column("fair_turn", Kind.BIGINT, Fill.FIELD, feature=True, claim=True, nullable=False),
    Column("checkpoint", Kind.PAYLOAD, claim=True, dead=True),
    Column("resumptions", Kind.INT, claim=True, nullable=False),
)
"""The jobs table, in the order listings read it (and JobRow's fields)."""

FAILED_ONLY: tuple[Column, ...] = (
    Column("failed_at", Kind.TIME, nullable=False),
    Column("error_type", Kind.KEY, nullable=False),
    Column("error_message", Kind.TEXT, nullable=False),
)
"""The dead letter's own columns, beside the job columns it keeps (``dead``)."""

BY_NAME = {c.name: c for c in JOBS}
CLAIMED = tuple(c for c in JOBS if c.claim)
"""What a claim returns, in ClaimedJob's field order."""
DEAD = tuple(c for c in JOBS if c.dead)
FAILED: tuple[Column, ...] = DEAD + FAILED_ONLY
"""The dead letter's columns, in the order listings read them (and FailedJobRow's fields)."""
INSERTED = tuple(c for c in JOBS if c.fill is not None)
"""Every column an enqueue may write, in insert order."""
PLAIN_INSERTED = tuple(c for c in INSERTED if not c.feature)
"""The columns a plain job's insert writes."""
FEATURES = tuple(c for c in INSERTED if c.feature)


def names(columns: tuple[Column, ...], prefix: str = "") -> str:
    """``"id, queue, ..."`` (each name after ``prefix``, e.g. ``"j."``) for a select or insert list."""
    return ", ".join(prefix + c.name for c in columns)


def claimed_index(name: str) -> int:
    """The position of a claimed column in a claimed row (and ClaimedJob)."""
    return next(i for i, c in enumerate(CLAIMED) if c.name == name)
