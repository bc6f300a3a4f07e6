"""Where each worker's claim starts when a claim from the start of the queue has become costly (issue 29).

A claim walks the claim index ``(queue, priority DESC, fair_turn, id)`` from the start of its queue.
Every job claimed leaves there the entry of its unreserved row version (the claim's UPDATE makes a new
version, outside the partial index, and the settle deletes that one); PostgreSQL drops such entries
(marks them dead in the index, or vacuums them) only once no snapshot can still see the version.  A
session sitting ``idle in transaction`` (an analyst's psql, a stuck migration) pins the oldest snapshot,
so nothing is dropped while it lasts: the entries of every job claimed since pile up at the front of the
index and every claim walks them all, a heap visit each (0.02 ms a claim growing to 13-24 ms after 3
minutes at 1,000 jobs/s).

So a worker remembers, per queue, the claim-order key ``(priority, fair_turn, id)`` of the last job it
claimed and, while a transaction other than errands' own has been open for :data:`HELD_FOR` (the same
query as ``errands doctor``'s ``open_transactions`` check and the ``errands_oldest_transaction_seconds``
gauge, asked at most every :data:`CHECK_EVERY` seconds) and a claim from the start costs more than
:data:`CHEAP`, claims **after** it: the same statement with ``priority = P AND (fair_turn, id) > (T, I)``,
which the index seeks to directly, past the dead entries.  A job can become claimable before that
position (a job of a higher priority, a retry, a delayed job coming due, a chain's next step, a lapsed
lease, an enqueue that committed late, and a queue of a lower priority once P's jobs are all taken), so
a claim from the start is still made every so often: after :data:`RESCAN_RATIO` times the last one's
cost has elapsed, at most :data:`RESCAN_MAX` seconds apart.  When a claim from the start is cheap (no
pinned snapshot: 0.02-0.2 ms), or when no transaction holds a snapshot that long, every claim is one, as
before, and priority, turns and ids keep their exact order (a busy machine that makes claims slow
changes nothing: the switch needs the held snapshot); while both hold, a job that does not lie after the
position waits at most until the next claim from the start.

The position is a hint, never a lock: claims after it run the claim's own conditions and ``FOR UPDATE
SKIP LOCKED``, so no job goes to two workers, and a position that ran ahead (the claim's commit failed)
only delays the jobs it skipped until the next claim from the start.  PostgreSQL only: MariaDB's InnoDB
has the same hazard (a long transaction stops the purge) but its claims are its own statements.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ...core.columns import claimed_index
from ..driver import Cursor

log = logging.getLogger("errands.store")

CHEAP = 0.002
"""Seconds: a claim from the start that took less than this (round trip included) is made every time
(today's claim, exact order); the issue's goal for a claim is 2 ms."""
RESCAN_RATIO = 20.0
"""While claims from the start are costly, the next one comes after this many times the last one's
cost: they take at most about 1/21 of the time a worker spends claiming."""
RESCAN_MAX = 5.0
"""Seconds between claims from the start at most, however costly: how long a job that lies before the
position (a higher priority, a retry, a due delayed job) can wait while a snapshot is pinned."""

HELD_FOR = 10.0
"""Seconds a transaction must have been open before claims may start after the position: at 1,000 jobs/s
a claim from the start then walks about 10,000 dead entries (2-5 ms here)."""
CHECK_EVERY = 5.0
"""Seconds between two looks at the oldest open transaction (one statement in a claim's transaction)."""
REFUSED_PAUSE = 600.0
"""Seconds before looking again after the server refused the look."""

Key = tuple[int, int, int]
"""A claim-order position: (priority, fair_turn, id)."""

_PRIORITY, _TURN, _ID = claimed_index("priority"), claimed_index("fair_turn"), claimed_index("id")


@dataclass
class QueuePosition:
    """One (worker, queue)'s last claimed key and what its last claim from the start cost."""

    key: Key | None = None
    full_cost: float = 0.0
    full_at: float = float("-inf")

    def after(self, now: float) -> Key | None:
        """The key to claim after, or None: claim from the start (cheap, never claimed yet, or due)."""
        if self.key is None or self.full_cost < CHEAP:
            return None
        if now - self.full_at >= min(RESCAN_MAX, RESCAN_RATIO * self.full_cost):
            return None
        return self.key

    def claimed(self, rows: Sequence[Any], *, full: bool, cost: float, now: float) -> None:
        """Note a claim's rows (in claim order) and, for a claim from the start, its cost."""
        if full:
            self.full_cost, self.full_at = cost, now
        if rows:
            last = rows[-1]
            self.key = (int(last[_PRIORITY]), int(last[_TURN]), int(last[_ID]))


class ClaimPositions:
    """The positions of every (owner, queue) this process claims for (one dialect, many threads)."""

    def __init__(self, oldest_sql: str) -> None:
        self._at: dict[tuple[str, str], QueuePosition] = {}
        self._lock = threading.Lock()
        self.oldest_sql = oldest_sql
        """The open transactions, oldest first (columns: id, kind, age in seconds...; param: how many)."""
        self.clock = time.monotonic
        """The clock claims are timed and spaced with (a test may replace it)."""
        self.held_for = HELD_FOR
        self._held = False
        self._checked_at = float("-inf")

    def held(self, cur: Cursor) -> bool:
        """Whether a transaction has held its snapshot for ``held_for`` seconds, as last seen: looked at
        on ``cur`` (the claim's own transaction) when the last look is CHECK_EVERY seconds old.

        The look is a hint, so it must never cost the claim: a refused look (a role without the
        catalogue's rights, a catalogue it lacks) is caught, under a savepoint if the claim runs in a
        transaction, and it or an answer that is not an age leaves claims as they were (from the
        start); a refused look is tried again only after REFUSED_PAUSE seconds, with one warning."""
        now = self.clock()
        if now - self._checked_at < CHECK_EVERY:
            return self._held
        self._checked_at = now
        # (The claim is one statement in autocommit; inside a transaction a savepoint keeps a refused
        # look from aborting it.)
        saved = getattr(getattr(cur, "connection", None), "autocommit", True) is False
        if saved:
            cur.execute("SAVEPOINT errands_claim_position")
        try:
            cur.execute(self.oldest_sql, (1,))
            row = cur.fetchone()
        except Exception as exc:  # noqa: BLE001 - any refusal of the look: the claim goes on without it
            if saved:
                cur.execute("ROLLBACK TO SAVEPOINT errands_claim_position")
            self._held, self._checked_at = False, now + REFUSED_PAUSE
            log.warning("claims cannot look for long-open transactions (%s): they start from the start of "
                        "the queue, as without one, and look again in %.0f s", exc, REFUSED_PAUSE)
            return False
        if saved:
            cur.execute("RELEASE SAVEPOINT errands_claim_position")
        age = row[2] if row is not None else None
        self._held = isinstance(age, (int, float, Decimal)) and float(age) >= self.held_for
        return self._held

    def of(self, owner: str, queue: str) -> QueuePosition:
        with self._lock:
            return self._at.setdefault((owner, queue), QueuePosition())


def after_sql(key: Key | None) -> tuple[str, tuple[Any, ...]]:
    """The pick's extra condition for claiming after ``key`` (nothing for a claim from the start): an
    equality on the index's second column and a row comparison on its next two, so the index scan
    starts at the key, not at the start of the queue."""
    if key is None:
        return "", ()
    return " AND priority = {p} AND (fair_turn, id) > ({p}, {p})", key
