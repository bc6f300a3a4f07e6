"""The alerts table: whether each alert is crossed now, and whose turn it is to evaluate them.

One row per alert (``kind`` and ``subject``: a queue's name, or "" for an alert about every queue)
holds whether it is crossed, the last value measured, the threshold and when it last changed; a
row ``("evaluation", "")`` holds when the fleet last evaluated.  Every change is a conditional
``UPDATE`` (``... WHERE crossed = 0``): of two processes that see the same crossing at the same
moment, exactly one changes the row, and only that one delivers the alert.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..core.rows import AlertState
from .database import Database
from .driver import Cursor, fetch_row, fetch_rows, scalar
from .insights import first_ready

EVALUATION = "evaluation"
"""The row whose ``checked_at`` says when the fleet last evaluated (its turn)."""


class AlertStore:
    """Crossing state and the measurements alerts compare with their thresholds (all bounded reads)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.d = db.dialect

    # ------------------------------------------------------------------ state
    def states(self) -> list[AlertState]:
        """Every alert's row (the evaluation's own row left out)."""
        def read(cur: Cursor) -> list[AlertState]:
            cur.execute(self.d.q("SELECT kind, subject, crossed, value, threshold, changed_at, checked_at "
                                 "FROM {alerts} WHERE kind <> {p} ORDER BY kind, subject"), (EVALUATION,))
            t = self.d.to_datetime
            return [AlertState(r["kind"], r["subject"], bool(r["crossed"]),
                               None if r["value"] is None else float(r["value"]),
                               None if r["threshold"] is None else float(r["threshold"]),
                               None if r["changed_at"] is None else t(r["changed_at"]),
                               None if r["checked_at"] is None else t(r["checked_at"])) for r in fetch_rows(cur)]

        return self.db.run(read)

    def crossed(self) -> list[AlertState]:
        """The alerts crossed now (what the dashboard's banners show)."""
        return [s for s in self.states() if s.crossed]

    def take_turn(self, every: float) -> bool:
        """Whether this process evaluates now: True for exactly one caller per ``every`` seconds
        (90 % of it, so that evaluators whose timers drift do not skip a round), fleet-wide."""
        def take(cur: Cursor) -> int:
            cur.execute(self.d.q("UPDATE {alerts} SET checked_at = {now} WHERE kind = {p} AND subject = '' "
                                 "AND (checked_at IS NULL OR checked_at <= {now_plus})"),
                        (EVALUATION, -0.9 * float(every)))
            won = int(cur.rowcount)
            if won == 0:
                cur.execute(self.d.q("SELECT 1 FROM {alerts} WHERE kind = {p} AND subject = ''"), (EVALUATION,))
                if fetch_row(cur) is None:  # the first evaluation ever: its row, taken by whoever inserts it
                    cur.execute(self.d.q(self.d.insert_ignore("{alerts}", "kind, subject, crossed, checked_at")),
                                (EVALUATION, "", 0, self.d.from_datetime(self.db.now_in(cur))))
                    won = int(cur.rowcount)
            return won

        return self.db.run(take, write=True) == 1

    def cross(self, kind: str, subject: str, value: float, threshold: float, at: datetime) -> bool:
        """Mark an alert crossed; True only for the caller whose ``UPDATE`` changed the row."""
        def change(cur: Cursor) -> int:
            cur.execute(self.d.q(self.d.insert_ignore("{alerts}", "kind, subject, crossed")), (kind, subject, 0))
            cur.execute(self.d.q("UPDATE {alerts} SET crossed = 1, value = {p}, threshold = {p}, changed_at = {p}, "
                                 "checked_at = {p} WHERE kind = {p} AND subject = {p} AND crossed = 0"),
                        (float(value), float(threshold), self.d.from_datetime(at), self.d.from_datetime(at),
                         kind, subject))
            return int(cur.rowcount)

        return self.db.run(change, write=True) == 1

    def clear(self, kind: str, subject: str, value: float | None, at: datetime) -> bool:
        """Mark an alert cleared; True only for the caller whose ``UPDATE`` changed the row."""
        def change(cur: Cursor) -> int:
            cur.execute(self.d.q("UPDATE {alerts} SET crossed = 0, value = {p}, changed_at = {p}, checked_at = {p} "
                                 "WHERE kind = {p} AND subject = {p} AND crossed = 1"),
                        (None if value is None else float(value), self.d.from_datetime(at), self.d.from_datetime(at),
                         kind, subject))
            return int(cur.rowcount)

        return self.db.run(change, write=True) == 1

    def still_crossed(self, rows: Sequence[tuple[str, str, float, float]], at: datetime) -> None:
        """The latest value of alerts that stay crossed (``(kind, subject, value, threshold)``), for
        the banners; delivers nothing."""
        if not rows:
            return

        def change(cur: Cursor) -> None:
            sql = self.d.q("UPDATE {alerts} SET value = {p}, threshold = {p}, checked_at = {p} "
                           "WHERE kind = {p} AND subject = {p} AND crossed = 1")
            for kind, subject, value, threshold in rows:
                cur.execute(sql, (float(value), float(threshold), self.d.from_datetime(at), kind, subject))

        self.db.run(change, write=True)

    # ------------------------------------------------------------------ measurements
    def dead_letter_count(self, cap: int) -> int:
        """Entries in the dead letter, counted up to ``cap + 1`` (bounded however long it is)."""
        def read(cur: Cursor) -> int:
            cur.execute(self.d.q("SELECT COUNT(*) AS n FROM (SELECT 1 FROM {failed} LIMIT {p}) capped"),
                        (int(cap) + 1,))
            return int(scalar(cur))

        return self.db.run(read)

    def heartbeat_ages(self) -> list[tuple[float, float | None]]:
        """Every registered worker's seconds since its last heartbeat (by the database's clock) and its
        own lease (None: it recorded none); liveness is judged from them (``worker.liveness``)."""
        def read(cur: Cursor) -> list[tuple[float, float | None]]:
            now = self.db.now_in(cur)
            cur.execute(self.d.q("SELECT heartbeat_at, lease FROM {workers}"))
            return [((now - self.d.to_datetime(r["heartbeat_at"])).total_seconds(),
                     None if r["lease"] is None else float(r["lease"])) for r in fetch_rows(cur)]

        return self.db.run(read)

    def oldest_ready(self, queues: Sequence[str] | None) -> tuple[datetime, dict[str, datetime]]:
        """The database's time and, per queue (None: every queue that holds jobs) that is not paused
        (its jobs wait on purpose), when its oldest ready job became due, judged as the overview
        judges it (its first 1,000 ready jobs by id: nothing scans the whole table)."""
        def read(cur: Cursor) -> tuple[datetime, dict[str, datetime]]:
            now = self.db.now_in(cur)
            names = sorted(self.d.queues_in_use(cur)) if queues is None else list(queues)
            cur.execute(self.d.q("SELECT name FROM {queues} WHERE paused = 1"))
            paused = {r["name"] for r in fetch_rows(cur)}
            return now, first_ready(self.d, cur, [n for n in names if n not in paused])

        return self.db.run(read)

