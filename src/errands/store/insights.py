"""Store verbs that read for people: throughput per minute, searches through jobs and the
dead letter, grouped failures, and the facts behind "why isn't this job running?".

Every listing is bounded: pages are keyset pages (``id < last id seen``) and counts stop
at a cap (``COUNT`` over a ``LIMIT`` subquery), so a table of a million jobs is never
scanned to draw one page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .accounts import like_pattern

if TYPE_CHECKING:
    from datetime import datetime

    from .features import _Base
    from .rows import FailedJobRow, JobRow
else:
    _Base = object

COUNT_CAP = 10_000
GROUPED_NEWEST = 10_000
"""How many of the newest dead-letter entries the grouped view looks at."""
STATES = ("ready", "delayed", "blocked", "running", "stale")


class StatRow(NamedTuple):
    minute: datetime
    queue: str
    succeeded: int
    failed: int


class FailureGroup(NamedTuple):
    name: str
    error_type: str
    message: str
    """The first 200 characters of the error message (entries are grouped by them)."""
    entries: int
    last_failed_at: datetime
    example_id: int


class InsightVerbs(_Base):
    # ------------------------------------------------------------------ throughput
    def add_stats(self, counts: dict[tuple[str, bool], int]) -> None:
        """Add finished runs to this minute's row per queue (workers call this every few seconds)."""
        per_queue: dict[str, list[int]] = {}
        for (queue, ok), n in counts.items():
            per_queue.setdefault(queue, [0, 0])[0 if ok else 1] += n
        if not per_queue:
            return

        def add(cur: Any) -> None:
            sql = self.q(self._stats_upsert())
            for queue, (ok, bad) in sorted(per_queue.items()):
                cur.execute(sql, (queue, ok, bad))

        self.run(add, write=True)

    def _stats_upsert(self) -> str:
        """INSERT this minute's counts for a queue (params: queue, succeeded, failed), or add them."""
        return ("INSERT INTO {stats} (minute, queue, succeeded, failed) VALUES (" + self.minute_sql() +
                ", {p}, {p}, {p}) ON CONFLICT (minute, queue) DO UPDATE SET "
                "succeeded = {stats}.succeeded + excluded.succeeded, failed = {stats}.failed + excluded.failed")

    def minute_sql(self) -> str:
        """The database's current time, truncated to the minute."""
        raise NotImplementedError

    def stats_since(self, seconds: float, queue: str | None = None) -> list[StatRow]:
        def read(cur: Any) -> list[StatRow]:
            where, params = ("", []) if queue is None else (" AND queue = {p}", [queue])
            cur.execute(self.q("SELECT minute, queue, succeeded, failed FROM {stats} WHERE minute >= {now_plus}" + where
                               + " ORDER BY minute"), [-float(seconds), *params])
            return [StatRow(self.to_datetime(r[0]), r[1], int(r[2]), int(r[3])) for r in cur.fetchall()]

        return self.run(read)

    def prune_stats(self, keep: float = 8 * 86400.0) -> None:
        self.run(lambda cur: cur.execute(self.q("DELETE FROM {stats} WHERE minute < {now_plus}"), (-float(keep),)))

    # ------------------------------------------------------------------ jobs
    def _job_filter(self, queue: str | None, state: str | None, name: str | None, text: str | None
                    ) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if queue:
            clauses.append("queue = {p}")
            params.append(queue)
        if name:
            clauses.append("name LIKE {p}" + self.like_escape)
            params.append(f"%{like_pattern(name)}%")
        if text:
            clauses.append("(payload LIKE {p}" + self.like_escape + " OR last_error LIKE {p}" + self.like_escape + ")")
            params += [f"%{like_pattern(text)}%"] * 2
        if state == "ready":
            clauses.append("reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now}")
        elif state == "delayed":
            clauses.append("reserved_by IS NULL AND blocked_by IS NULL AND available_at > {now}")
        elif state == "blocked":
            clauses.append("reserved_by IS NULL AND blocked_by IS NOT NULL")
        elif state == "running":
            clauses.append("reserved_by IS NOT NULL AND reserved_until >= {now}")
        elif state == "stale":
            clauses.append("reserved_by IS NOT NULL AND reserved_until < {now}")
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def search_jobs(self, *, queue: str | None = None, state: str | None = None, name: str | None = None,
                    text: str | None = None, before_id: int | None = None, after_id: int | None = None,
                    oldest_first: bool = False, limit: int = 50) -> list[JobRow]:
        """One keyset page of the jobs table, newest first (or oldest first)."""
        from .base import JOB_COLUMNS

        def read(cur: Any) -> list[JobRow]:
            where, params = self._job_filter(queue, state, name, text)
            if before_id is not None:
                where += (" AND " if where else " WHERE ") + "id < {p}"
                params.append(before_id)
            if after_id is not None:
                where += (" AND " if where else " WHERE ") + "id > {p}"
                params.append(after_id)
            order = "id" if oldest_first else "id DESC"
            cur.execute(self.q("SELECT " + JOB_COLUMNS + " FROM {jobs}" + where + f" ORDER BY {order} LIMIT {{p}}"),
                        [*params, int(limit)])
            return [self._job(r) for r in cur.fetchall()]  # type: ignore[attr-defined]

        return self.run(read)

    def count_jobs(self, *, queue: str | None = None, state: str | None = None, name: str | None = None,
                   text: str | None = None, cap: int = COUNT_CAP) -> int:
        """How many jobs match, counting at most ``cap + 1`` rows (shown as "10,000+")."""

        def read(cur: Any) -> int:
            where, params = self._job_filter(queue, state, name, text)
            cur.execute(self.q("SELECT COUNT(*) FROM (SELECT 1 FROM {jobs}" + where + " LIMIT {p}) capped"),
                        [*params, int(cap) + 1])
            return int(cur.fetchone()[0])

        return self.run(read)

    def oldest_ready(self, queues: Sequence[str]) -> dict[str, datetime]:
        """Per queue, when its oldest ready job became due (how far the queue lags), judged from
        its first 1,000 ready jobs by id: ids grow with time, and nothing scans the whole table."""

        def read(cur: Any) -> dict[str, datetime]:
            out = {}
            for queue in queues:
                cur.execute(self.q("SELECT MIN(available_at) FROM (SELECT available_at FROM {jobs} WHERE queue = {p} "
                                   "AND reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now} "
                                   "ORDER BY id LIMIT 1000) first_ready"), (queue,))
                row = cur.fetchone()
                if row and row[0] is not None:
                    out[queue] = self.to_datetime(row[0])
            return out

        return self.run(read)

    def capped_counts(self, queues: Sequence[str], cap: int = COUNT_CAP) -> dict[str, dict[str, int]]:
        """Per queue and state, how many jobs, each count stopping at ``cap + 1``.

        Every count is a LIMIT subquery that an index serves (the claim index for ready,
        delayed and blocked jobs, the lease index for running and stale ones), so the
        overview stays fast with millions of jobs; :meth:`counts` is the exact, scanning twin.
        """
        where = {
            "ready": "reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now}",
            "delayed": "reserved_by IS NULL AND blocked_by IS NULL AND available_at > {now}",
            "blocked": "reserved_by IS NULL AND blocked_by IS NOT NULL",
            "running": "reserved_by IS NOT NULL AND reserved_until >= {now}",
            "stale": "reserved_by IS NOT NULL AND reserved_until < {now}",
        }

        def read(cur: Any) -> dict[str, dict[str, int]]:
            out: dict[str, dict[str, int]] = {}
            for queue in queues:
                counts = {}
                for state, condition in where.items():
                    cur.execute(self.q("SELECT COUNT(*) FROM (SELECT 1 FROM {jobs} WHERE queue = {p} AND " + condition
                                       + " LIMIT {p}) capped"), (queue, int(cap) + 1))
                    counts[state] = int(cur.fetchone()[0])
                cur.execute(self.q("SELECT COUNT(*) FROM (SELECT 1 FROM {failed} WHERE queue = {p} LIMIT {p}) capped"),
                            (queue, int(cap) + 1))
                counts["failed"] = int(cur.fetchone()[0])
                out[queue] = counts
            return out

        return self.run(read)

    def active_queues(self) -> list[str]:
        """Queues with recent runs (the stats of the last week) or a row in the queues table."""

        def read(cur: Any) -> list[str]:
            cur.execute(self.q("SELECT DISTINCT queue FROM {stats} WHERE minute >= {now_plus}"), (-7 * 86400.0,))
            found = {r[0] for r in cur.fetchall()}
            cur.execute(self.q("SELECT name FROM {queues}"))
            return sorted(found | {r[0] for r in cur.fetchall()})

        return self.run(read)

    # ------------------------------------------------------------------ dead letter
    def _failed_where(self, queue: str | None, name: str | None, text: str | None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if queue:
            clauses.append("queue = {p}")
            params.append(queue)
        if name:
            clauses.append("name LIKE {p}" + self.like_escape)
            params.append(f"%{like_pattern(name)}%")
        if text:
            clauses.append("(payload LIKE {p}" + self.like_escape + " OR error_message LIKE {p}" + self.like_escape
                           + " OR error_type LIKE {p}" + self.like_escape + ")")
            params += [f"%{like_pattern(text)}%"] * 3
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def search_failed(self, *, queue: str | None = None, name: str | None = None, text: str | None = None,
                      before_id: int | None = None, limit: int = 50) -> list[FailedJobRow]:
        from .base import FAILED_COLUMNS

        def read(cur: Any) -> list[FailedJobRow]:
            where, params = self._failed_where(queue, name, text)
            if before_id is not None:
                where += (" AND " if where else " WHERE ") + "id < {p}"
                params.append(before_id)
            cur.execute(self.q("SELECT " + FAILED_COLUMNS + " FROM {failed}" + where + " ORDER BY id DESC LIMIT {p}"),
                        [*params, int(limit)])
            return [self._failed(r) for r in cur.fetchall()]  # type: ignore[attr-defined]

        return self.run(read)

    def count_failed(self, *, queue: str | None = None, name: str | None = None, text: str | None = None,
                     cap: int | None = COUNT_CAP) -> int:
        def read(cur: Any) -> int:
            where, params = self._failed_where(queue, name, text)
            if cap is None:
                cur.execute(self.q("SELECT COUNT(*) FROM {failed}" + where), params)
            else:
                cur.execute(self.q("SELECT COUNT(*) FROM (SELECT 1 FROM {failed}" + where + " LIMIT {p}) capped"),
                            [*params, int(cap) + 1])
            return int(cur.fetchone()[0])

        return self.run(read)

    def failed_ids(self, *, queue: str | None = None, name: str | None = None, text: str | None = None,
                   limit: int = 100_000) -> list[int]:
        """Ids of the dead-letter entries a filter matches (for bulk retry and forget)."""

        def read(cur: Any) -> list[int]:
            where, params = self._failed_where(queue, name, text)
            cur.execute(self.q("SELECT id FROM {failed}" + where + " ORDER BY id LIMIT {p}"), [*params, int(limit)])
            return [int(r[0]) for r in cur.fetchall()]

        return self.run(read)

    def failure_groups(self, *, queue: str | None = None, name: str | None = None, text: str | None = None,
                       limit: int = 50, newest: int = GROUPED_NEWEST) -> list[FailureGroup]:
        """The newest ``newest`` dead-letter entries grouped by job and error (type and the start
        of the message): bounded work however long the dead letter is."""

        def read(cur: Any) -> list[FailureGroup]:
            where, params = self._failed_where(queue, name, text)
            msg = self.prefix_sql("error_message", 200)
            cur.execute(self.q(f"SELECT name, error_type, {msg} AS msg, COUNT(*), MAX(failed_at), MAX(id) "
                               "FROM (SELECT id, name, error_type, error_message, failed_at FROM {failed}" + where +
                               " ORDER BY id DESC LIMIT {p}) newest" + f" GROUP BY name, error_type, {msg} "
                               "ORDER BY COUNT(*) DESC, MAX(id) DESC LIMIT {p}"), [*params, int(newest), int(limit)])
            return [FailureGroup(r[0], r[1], r[2], int(r[3]), self.to_datetime(r[4]), int(r[5]))
                    for r in cur.fetchall()]

        return self.run(read)

    def prefix_sql(self, column: str, length: int) -> str:
        return f"SUBSTR({column}, 1, {int(length)})"

    # ------------------------------------------------------------------ why is a job waiting
    def dependency_of(self, job_id: int) -> tuple[str, int | None]:
        """Where the job a blocked job waits for is: "jobs", "failed", "cancelled" or "gone"."""

        def read(cur: Any) -> tuple[str, int | None]:
            cur.execute(self.q("SELECT blocked_by FROM {jobs} WHERE id = {p}"), (job_id,))
            row = cur.fetchone()
            if row is None or row[0] is None:
                return "none", None
            parent = int(row[0])
            for table, where in (("jobs", ""), ("failed", "")):
                cur.execute(self.q(f"SELECT 1 FROM {{{table}}} WHERE id = {{p}}{where}"), (parent,))
                if cur.fetchone():
                    return table, parent
            cur.execute(self.q("SELECT state FROM {results} WHERE id = {p}"), (parent,))
            r = cur.fetchone()
            return ("cancelled" if r and r[0] == "cancelled" else "gone"), parent

        return self.run(read)

    def group_running(self, group: str) -> int:
        """Admitted runs of a concurrency group whose lease is alive."""

        def read(cur: Any) -> int:
            cur.execute(self.q("SELECT COUNT(*) FROM {group_runs} g JOIN {jobs} j ON j.id = g.job_id WHERE "
                               "g.name = {p} AND j.reserved_by IS NOT NULL AND j.reserved_until >= {now} "
                               "AND j.admitted_at >= j.reserved_at"), (group,))
            return int(cur.fetchone()[0])

        return self.run(read)

    def rate_starts(self, name: str, period: float) -> int:
        def read(cur: Any) -> int:
            cur.execute(self.q("SELECT COUNT(*) FROM {rate_starts} WHERE name = {p} AND started_at > {now_plus}"),
                        (name, -float(period)))
            return int(cur.fetchone()[0])

        return self.run(read)

    def jobs_by_ids(self, ids: Sequence[int]) -> list[JobRow]:
        from .base import JOB_COLUMNS

        if not ids:
            return []

        def read(cur: Any) -> list[JobRow]:
            cur.execute(self.q("SELECT " + JOB_COLUMNS + " FROM {jobs} WHERE id IN (") + self._in(ids) + ")", list(ids))
            return [self._job(r) for r in cur.fetchall()]  # type: ignore[attr-defined]

        return self.run(read)
