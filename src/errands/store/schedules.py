"""Schedules stored in the database (``errands_schedules``) and the claim of their slots.

Every change of a stored schedule (edit, pause, resume) bumps its ``version`` and copies it to the
schedule's row of ``errands_periodic``, in one transaction.  A scheduler claims a slot with a
conditional ``UPDATE`` of that row (``last_slot < slot``, and for a stored schedule ``version = the
version it read``): exactly one scheduler wins each slot, and none wins it under a definition that
was changed since it read it (it reads the table again at its next tick and claims then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..core.errors import ConfigurationError
from ..core.rows import NewJob, as_int
from ..core.schedules import ScheduleRow
from .database import Database
from .driver import Cursor, Row, fetch_row, fetch_rows, scalar
from .steps import Steps

COLUMNS = ("job", "cron", "timezone", "payload", "queue", "priority", "catch_up", "catch_up_limit")
"""The columns an edit may change (besides ``paused``, which pause and resume change)."""
RESETS = frozenset({"cron", "timezone"})
"""An edit of these starts the schedule afresh: its first slot is the first one after the edit."""
SELECT = ("SELECT name, job, cron, timezone, payload, queue, priority, catch_up, catch_up_limit, paused, version, "
          "created_at, updated_at FROM {schedules}")


class ScheduleStore:
    """Stored schedules: add, edit, pause, resume, delete, list; and the claim of any schedule's slots."""

    def __init__(self, db: Database, steps: Steps) -> None:
        self.db = db
        self.d = db.dialect
        self.steps = steps

    # ------------------------------------------------------------------ reads
    def rows(self) -> list[ScheduleRow]:
        """Every stored schedule, by name: one SELECT of a small table (what each scheduler tick reads)."""
        def read(cur: Cursor) -> list[ScheduleRow]:
            cur.execute(self.d.q(SELECT + " ORDER BY name"))
            return [self._row(r) for r in fetch_rows(cur)]

        return self.db.run(read)

    def get(self, name: str) -> ScheduleRow | None:
        def read(cur: Cursor) -> ScheduleRow | None:
            return self._get(cur, name)

        return self.db.run(read)

    def last_slot(self, name: str) -> datetime | None:
        """The latest slot of schedule ``name`` that was claimed (None: never)."""
        def read(cur: Cursor) -> datetime | None:
            cur.execute(self.d.q("SELECT last_slot FROM {periodic} WHERE name = {p}"), (name,))
            value = scalar(cur)
            return None if value is None else self.d.to_datetime(value)

        return self.db.run(read)

    # ------------------------------------------------------------------ changes
    def add(self, name: str, values: Mapping[str, Any]) -> ScheduleRow:
        """Store a new schedule (``values``: every column of :data:`COLUMNS`); its first slot is the
        first one after now.  ConfigurationError if one of that name exists."""
        def insert(cur: Cursor) -> ScheduleRow:
            if self._get(cur, name) is not None:
                raise ConfigurationError(f"a stored schedule named {name!r} exists: edit it, or delete it first")
            now = self.d.from_datetime(self.db.now_in(cur))
            cur.execute(self.d.q(f"INSERT INTO {{schedules}} (name, {', '.join(COLUMNS)}, paused, version, "
                                 "created_at, updated_at) VALUES ({p}, " + ", ".join("{p}" for _ in COLUMNS)
                                 + ", 0, 1, {p}, {p})"), (name, *(values[c] for c in COLUMNS), now, now))
            cur.execute(self.d.q(self.d.upsert("{periodic}", "name", ("last_slot", "updated_at", "version"))),
                        (name, now, now, 1))
            return self._must_get(cur, name)

        return self.db.run(insert, write=True)

    def edit(self, name: str, changes: Mapping[str, Any]) -> ScheduleRow | None:
        """Change some of :data:`COLUMNS`; None if no such schedule.  A new cron or time zone starts
        the schedule afresh (its next slot is the first after now)."""
        unknown = set(changes) - set(COLUMNS)
        if unknown:
            raise ConfigurationError(f"a schedule has no column {sorted(unknown)[0]!r}")
        sets = "".join(f"{c} = {{p}}, " for c in changes)
        return self._change(name, sets, tuple(changes.values()), reset=bool(RESETS & set(changes)))

    def set_paused(self, name: str, paused: bool) -> ScheduleRow | None:
        """Pause or resume; None if no such schedule.  A resumed schedule starts with its next slot
        (the slots that passed while it was paused do not run, whatever its catch-up)."""
        return self._change(name, "paused = {p}, ", (1 if paused else 0,), reset=not paused)

    def delete(self, name: str) -> bool:
        def remove(cur: Cursor) -> bool:
            cur.execute(self.d.q("DELETE FROM {schedules} WHERE name = {p}"), (name,))
            found = int(cur.rowcount) > 0
            if found:
                cur.execute(self.d.q("DELETE FROM {periodic} WHERE name = {p}"), (name,))
            return found

        return self.db.run(remove, write=True)

    def _change(self, name: str, sets: str, values: tuple[Any, ...], *, reset: bool) -> ScheduleRow | None:
        def change(cur: Cursor) -> ScheduleRow | None:
            now = self.d.from_datetime(self.db.now_in(cur))
            cur.execute(self.d.q("UPDATE {schedules} SET " + sets + "version = version + 1, updated_at = {p} "
                                 "WHERE name = {p}"), (*values, now, name))
            if int(cur.rowcount) == 0:
                return None
            row = self._must_get(cur, name)
            cur.execute(self.d.q(self.d.insert_ignore("{periodic}", "name, last_slot, updated_at, version")),
                        (name, now, now, row.version))
            cur.execute(self.d.q("UPDATE {periodic} SET version = {p}, updated_at = {p}"
                                 + (", last_slot = {p}" if reset else "") + " WHERE name = {p}"),
                        (row.version, now, *((now,) if reset else ()), name))
            return row

        return self.db.run(change, write=True)

    # ------------------------------------------------------------------ the scheduler's claim
    def claim_slots(self, name: str, runs: Sequence[tuple[datetime, NewJob | None]],
                    version: int | None = None) -> list[int] | None:
        """Claim ``runs``' slots (oldest first) of schedule ``name`` and enqueue the job of each slot
        this caller wins (None: the slot is only marked as passed); the ids enqueued.

        ``version``: a stored schedule's version as the caller read it; None (the claim is refused,
        nothing done) when the schedule changed since, or was deleted.  A schedule the database has
        never seen only records its latest slot: it starts with the next one."""
        def claim(cur: Cursor) -> list[int] | None:
            latest = self.d.from_datetime(runs[-1][0])
            cur.execute(self.d.q(self.d.insert_ignore("{periodic}", "name, last_slot, updated_at, version")),
                        (name, latest, latest, version))
            ids: list[int] = []
            for slot, job in runs:
                stored = self.d.from_datetime(slot)
                cur.execute(self.d.q("UPDATE {periodic} SET last_slot = {p}, updated_at = {now} WHERE name = {p} "
                                     "AND (last_slot IS NULL OR last_slot < {p})"
                                     + (" AND version = {p}" if version is not None else "")),
                            (stored, name, stored, *((version,) if version is not None else ())))
                if int(cur.rowcount) == 1:
                    ids += self.steps.insert_rich(cur, [job]) if job is not None else []
                elif version is not None and self._stale(cur, name, version):
                    return None
            return ids

        return self.db.run(claim, write=True) if runs else []

    # ------------------------------------------------------------------ rows
    def _stale(self, cur: Cursor, name: str, version: int) -> bool:
        cur.execute(self.d.q("SELECT version FROM {periodic} WHERE name = {p}"), (name,))
        row = fetch_row(cur)
        if row is not None and as_int(row["version"], -1) == version:
            return False
        cur.execute(self.d.q("SELECT version FROM {schedules} WHERE name = {p}"), (name,))
        current = fetch_row(cur)
        if row is not None and current is not None and as_int(current["version"], -1) == version:
            # The schedule's row was changed by hand (SQL that bumped its version only): mend the
            # copy, the claim succeeds at the caller's next tick.
            cur.execute(self.d.q("UPDATE {periodic} SET version = {p} WHERE name = {p}"), (version, name))
        return True

    def _get(self, cur: Cursor, name: str) -> ScheduleRow | None:
        cur.execute(self.d.q(SELECT + " WHERE name = {p}"), (name,))
        row = fetch_row(cur)
        return None if row is None else self._row(row)

    def _must_get(self, cur: Cursor, name: str) -> ScheduleRow:
        row = self._get(cur, name)
        if row is None:  # pragma: no cover - read in the transaction that wrote it
            raise ConfigurationError(f"schedule {name!r} vanished")
        return row

    def _row(self, r: Row) -> ScheduleRow:
        """A row as stored; odd values (another program wrote them) are kept for the scheduler to refuse."""
        def text(value: Any) -> str | None:
            return None if value is None else str(value)

        def when(value: Any) -> datetime | None:
            try:
                return None if value is None else self.d.to_datetime(value)
            except (TypeError, ValueError, OverflowError):
                return None

        limit, priority = r["catch_up_limit"], r["priority"]
        return ScheduleRow(str(r["name"]), str(r["job"]), str(r["cron"]), text(r["timezone"]), str(r["payload"]),
                           text(r["queue"]), None if priority is None else as_int(priority),
                           str(r["catch_up"]), None if limit is None else as_int(limit, -1),
                           bool(as_int(r["paused"])), as_int(r["version"]), when(r["created_at"]),
                           when(r["updated_at"]))
