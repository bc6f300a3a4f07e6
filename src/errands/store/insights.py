"""Store verbs that read for people: throughput per minute, searches through jobs and the
dead letter, grouped failures, and the facts behind "why isn't this job running?".

Every listing is bounded: pages are keyset pages (``id < last id seen``), counts stop
at a cap (``COUNT`` over a ``LIMIT`` subquery), and a search by text or job name (``LIKE
'%...%'``, which no index serves) looks at a window of at most ``SEARCH_WINDOW`` rows from
where its page starts, so a table of a million jobs is never scanned to draw one page.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from ..core.rows import FailedJobRow, JobRow
from .accounts import like_pattern
from .database import Database
from .dialects.base import FAILED_COLUMNS, JOB_COLUMNS, Dialect
from .driver import Cursor, Row, fetch_row, fetch_rows, scalar

COUNT_CAP = 10_000
SEARCH_WINDOW = 100_000
"""How many jobs (by id, from where the page starts) one text or job-name search looks at."""
WAITING_SAMPLE = 5_000
"""How many waiting jobs of a queue the overview reads to tell ready from delayed ones."""
DEAD_SEARCH_WINDOW = 50_000
"""The same for the dead letter, whose rows carry error messages too (more to read per row)."""
GROUPED_NEWEST = 10_000
"""How many of the newest dead-letter entries the grouped view looks at."""
STATES = ("ready", "delayed", "blocked", "running", "stale")
_NONE_WAITING: Row = {"seen": 0, "due": 0, "first_due": None}
"""What :meth:`InsightStore.capped_counts` reads of a queue's waiting sample when the aggregate gives no row."""


class StateCounts(NamedTuple):
    counts: dict[str, int]
    """Jobs per state (ready, delayed, blocked, running, stale, failed)."""
    at_least: frozenset[str]
    """States whose number is a lower bound: there are more rows than the count looked at."""
    oldest_due: datetime | None = None
    """When the oldest ready job became due, if the count saw every waiting job (else None)."""


class Backlog(NamedTuple):
    """One queue's autoscaling figures (:meth:`InsightStore.backlog`)."""

    jobs: int
    """Jobs a worker could claim now, up to ``BACKLOG_CAP`` (a paused queue has none)."""
    age_seconds: int
    """Whole seconds the oldest of them has been due; 0 when there is none."""


class ConnectionCount(NamedTuple):
    """The server's sessions on this database, by client name, and its connection limit."""

    by_name: dict[str, int]
    total: int
    server_max: int


class FailureGroup(NamedTuple):
    name: str
    error_type: str
    message: str
    """The first 200 characters of the error message (entries are grouped by them)."""
    entries: int
    last_failed_at: datetime
    example_id: int


WAITING_NAMES_SAMPLE = 10_000
"""How many waiting jobs of a queue ``waiting_job_names`` looks at."""


class InsightStore:
    """Bounded reads for the dashboard, the status command and ``errands doctor``."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.d = db.dialect

    # ------------------------------------------------------------------ connections
    def connections(self) -> ConnectionCount | None:
        """How many connections the server holds for this database (PostgreSQL by
        ``application_name``, which names errands' process: see ``connection_label``), and its
        ``max_connections``; None where the database has no server (SQLite)."""
        d = self.d
        if d.connections_sql is None or d.max_connections_sql is None:
            return None
        sessions, limit = d.connections_sql, d.max_connections_sql

        def read(cur: Cursor) -> ConnectionCount:
            cur.execute(sessions)
            by_name = {str(r["name"] or ""): int(r["n"]) for r in fetch_rows(cur)}
            cur.execute(limit)
            return ConnectionCount(by_name, sum(by_name.values()), int(scalar(cur)))

        return self.db.run(read)

    def oldest_transaction(self) -> float | None:
        """Seconds the oldest open transaction in this database has been open, errands' own (named)
        sessions and this one left out (0.0: none open); None where no snapshot can hold back the
        cleanup of dead rows (SQLite).  One read of the server's activity views, for ``/metrics``."""
        sql = self.d.open_transactions_sql
        if sql is None:
            return None

        def read(cur: Cursor) -> float:
            cur.execute(sql, (1,))
            row = fetch_row(cur)
            return 0.0 if row is None else float(row["age_seconds"] or 0.0)

        return self.db.run(read)

    # ------------------------------------------------------------------ throughput
    def add_stats(self, counts: dict[tuple[str, bool], int]) -> None:
        """Add finished runs to this minute's row per queue (workers call this every few seconds)."""
        per_queue: dict[str, list[int]] = {}
        for (queue, ok), n in counts.items():
            per_queue.setdefault(queue, [0, 0])[0 if ok else 1] += n
        if not per_queue:
            return

        def add(cur: Cursor) -> None:
            sql = self.d.q(self.d.stats_upsert())
            for queue, (ok, bad) in sorted(per_queue.items()):
                cur.execute(sql, (queue, ok, bad))

        self.db.run(add, write=True)

    def throughput_buckets(self, start: datetime, seconds_per_bucket: int) -> list[tuple[int, int, int]]:
        """``(bucket, succeeded, failed)`` since ``start``, bucket ``n`` covering
        ``start + n * seconds_per_bucket`` onwards, summed in the database: a week is 60,480 rows
        for six queues, and carrying them to Python cost more than the rest of the overview."""

        def read(cur: Cursor) -> list[tuple[int, int, int]]:
            cur.execute(self.d.q("SELECT " + self.d.floor_sql("(" + self.d.epoch_sql("minute") + " - {p}) / {p}")
                               + " AS bucket, SUM(succeeded) AS n_succeeded, SUM(failed) AS n_failed "
                               "FROM {stats} WHERE minute >= {p} GROUP BY bucket"),
                        (start.timestamp(), int(seconds_per_bucket), self.d.from_datetime(start)))
            return [(int(r["bucket"]), int(r["n_succeeded"]), int(r["n_failed"])) for r in fetch_rows(cur)]

        return self.db.run(read)

    def queue_throughput_buckets(self, start: datetime, seconds_per_bucket: int, queue: str | None = None
                                 ) -> list[tuple[str, int, int, int]]:
        """``(queue, bucket, succeeded, failed)`` since ``start``, per queue (or of one ``queue``), as
        :meth:`throughput_buckets`: a range of the stats table's key (minute, queue), summed in the
        database, at most one row per queue and bucket."""

        def read(cur: Cursor) -> list[tuple[str, int, int, int]]:
            one = " AND queue = {p}" if queue is not None else ""
            cur.execute(self.d.q("SELECT queue, " + self.d.floor_sql("(" + self.d.epoch_sql("minute") + " - {p}) / {p}")
                                 + " AS bucket, SUM(succeeded) AS n_succeeded, SUM(failed) AS n_failed "
                                 "FROM {stats} WHERE minute >= {p}" + one + " GROUP BY queue, bucket"),
                        (start.timestamp(), int(seconds_per_bucket), self.d.from_datetime(start),
                         *(() if queue is None else (queue,))))
            return [(r["queue"], int(r["bucket"]), int(r["n_succeeded"]), int(r["n_failed"])) for r in fetch_rows(cur)]

        return self.db.run(read)

    def prune_stats(self, keep: float = 8 * 86400.0) -> None:
        self.db.run(lambda cur: cur.execute(self.d.q("DELETE FROM {stats} WHERE minute < {now_plus}"), (-float(keep),)))

    # ------------------------------------------------------------------ jobs
    def _job_filter(self, queue: str | None, state: str | None, name: str | None, text: str | None
                    ) -> tuple[str, list[Any]]:
        return job_filter_sql(self.d, queue, state, name, text)

    def search_jobs(self, *, queue: str | None = None, state: str | None = None, name: str | None = None,
                    text: str | None = None, before_id: int | None = None, after_id: int | None = None,
                    oldest_first: bool = False, limit: int = 50, edge_id: int | None = None) -> list[JobRow]:
        """One keyset page of the jobs table, newest first (or oldest first).

        ``edge_id`` (from :meth:`scan_edge`) ends the window a search may look at: ids from it
        upwards when newest first, up to it when oldest first."""
        def read(cur: Cursor) -> list[JobRow]:
            where, params = self._job_filter(queue, state, name, text)
            where, params = _keyset(where, params, before_id, after_id, edge_id, oldest_first)
            order = "id" if oldest_first else "id DESC"
            cur.execute(self.d.q("SELECT " + JOB_COLUMNS + " FROM {jobs}" + where + f" ORDER BY {order} LIMIT {{p}}"),
                        [*params, int(limit)])
            return [JobRow.from_row(r, self.d.to_datetime) for r in cur.fetchall()]

        return self.db.run(read)

    def count_jobs(self, *, queue: str | None = None, state: str | None = None, name: str | None = None,
                   text: str | None = None, cap: int = COUNT_CAP, before_id: int | None = None,
                   after_id: int | None = None, edge_id: int | None = None, oldest_first: bool = False) -> int:
        """How many jobs match, counting at most ``cap + 1`` rows (shown as "10,000+"); with
        ``edge_id``, only within that search window (see :meth:`search_jobs`)."""

        def count(cur: Cursor, queue: str | None, limit: int) -> int:
            where, params = self._job_filter(queue, state, name, text)
            where, params = _keyset(where, params, before_id, after_id, edge_id, oldest_first)
            cur.execute(self.d.q("SELECT COUNT(*) AS n FROM (SELECT 1 FROM {jobs}" + where + " LIMIT {p}) capped"),
                        [*params, limit])
            return int(scalar(cur))

        def read(cur: Cursor) -> int:
            if queue or not self.d.count_waiting_per_queue or state not in ("ready", "delayed", "blocked"):
                return count(cur, queue, int(cap) + 1)
            # MySQL: the claim index leads with the queue and no skip scan jumps over it, so a waiting
            # state over every queue (blocked, a few thousand rows among a million) was a scan of the
            # whole index (700 ms); one range of it per queue is a few ms each.
            total = 0
            for each in sorted(self.d.queues_in_use(cur)):
                total += count(cur, each, int(cap) + 1 - total)
                if total > cap:
                    break
            return total

        return self.db.run(read)

    def window(self, rows: int) -> int:
        """How many rows a search window of ``rows`` reads on this database (its ``search_window_share``)."""
        return max(1, int(rows * self.d.search_window_share))

    def scan_edge(self, table: str, *, before_id: int | None = None, after_id: int | None = None,
                  rows: int = SEARCH_WINDOW, oldest_first: bool = False) -> int | None:
        """The last id of a search window of ``rows`` rows of ``table`` ("jobs" or "failed")
        that starts below ``before_id`` (newest first) or above ``after_id`` (oldest first), or
        at the newest (oldest) row; None when the table ends first (the window holds every
        row left).

        Read from the primary key alone (``ORDER BY id ... OFFSET``), so finding the edge
        costs a walk over ``rows`` index entries, not the rows themselves."""
        tables = {"jobs": "{jobs}", "failed": "{failed}"}
        if table not in tables or rows < 1:
            raise ValueError(f"no search window over {table!r} of {rows} rows")

        def read(cur: Cursor) -> int | None:
            if after_id is not None:
                where, order, params = " WHERE id > {p}", "id", [after_id]
            elif oldest_first:
                where, order, params = "", "id", []
            elif before_id is not None:
                where, order, params = " WHERE id < {p}", "id DESC", [before_id]
            else:
                where, order, params = "", "id DESC", []
            cur.execute(self.d.q("SELECT id FROM " + tables[table] + where + f" ORDER BY {order} LIMIT 1 OFFSET {{p}}"),
                        [*params, int(rows) - 1])
            edge = scalar(cur)
            return None if edge is None else int(edge)

        return self.db.run(read)

    def waiting_job_names(self, queues: Sequence[str], sample: int = WAITING_NAMES_SAMPLE) -> set[str]:
        """The job names among the next ``sample`` waiting jobs of each queue (in id order): what a
        worker starting on these queues will meet first.  Bounded, so a backlog of millions reads as
        fast as ten jobs."""

        def read(cur: Cursor) -> set[str]:
            names: set[str] = set()
            for queue in queues:
                cur.execute(self.d.q("SELECT DISTINCT name FROM (SELECT name FROM {jobs} WHERE queue = {p} "
                                     "AND reserved_by IS NULL ORDER BY id LIMIT {p}) waiting"), (queue, int(sample)))
                names.update(r["name"] for r in fetch_rows(cur))
            return names

        return self.db.run(read)

    def oldest_ready(self, queues: Sequence[str]) -> dict[str, datetime]:
        """Per queue, when its oldest ready job became due (how far the queue lags), judged from
        its first 1,000 ready jobs by id: ids grow with time, and nothing scans the whole table.

        Meant for queues with many waiting jobs (the overview has the exact answer for the
        others from :meth:`capped_counts`): read in id order, the first 1,000 come quickly."""

        return self.db.run(lambda cur: first_ready(self.d, cur, queues))

    def backlog(self, queues: Sequence[str]) -> dict[str, Backlog]:
        """Per queue, what an autoscaler reads: its claimable jobs (ready, queue not paused; up to
        ``BACKLOG_CAP``) and the whole seconds the oldest of the next ones to run has been due.

        The dialect's two statements, which docs/autoscaling.md hands to KEDA's SQL scalers with
        the queue written in: the ``/metrics`` gauges and those scalers read the same numbers."""

        def read(cur: Cursor) -> dict[str, Backlog]:
            out: dict[str, Backlog] = {}
            for queue in queues:
                cur.execute(self.d.q(self.d.backlog_jobs_sql), (queue, queue))
                jobs = int(scalar(cur) or 0)
                cur.execute(self.d.q(self.d.backlog_age_sql), (queue, queue))
                out[queue] = Backlog(jobs, int(scalar(cur) or 0))
            return out

        return self.db.run(read)

    def capped_counts(self, queues: Sequence[str], cap: int = COUNT_CAP, sample: int = WAITING_SAMPLE
                      ) -> dict[str, StateCounts]:
        """Per queue and state, how many jobs, in bounded work: at most ``cap + 1`` rows a count.

        Ready and delayed jobs are told apart by their due time, which no index holds, so
        counting either one up to the cap would read ``cap / share`` rows: a few delayed jobs
        among a million ready ones meant reading the whole queue (six queues took 420 ms on
        PostgreSQL).  Instead one pass reads at most ``sample + 1`` waiting rows of the queue
        and sorts them into ready and delayed: exact when the queue has no more, otherwise
        both numbers are lower bounds (flagged in ``at_least``).  Each of those rows is a
        visit to the table (MySQL: a primary-key lookup), hence a sample smaller than the cap:
        with MariaDB's default 128 MB buffer pool, six samples of 10,000 stopped fitting and
        took 1.5 s, of 5,000 90 ms.  Blocked, running,
        stale and failed jobs are capped counts that an index serves (the blocked and lease
        indexes, MySQL's claim index, the dead letter's queue index); one over the cap is
        flagged too.  :meth:`counts` is the exact, scanning twin.
        """
        where = {
            "blocked": "reserved_by IS NULL AND blocked_by IS NOT NULL",
            "running": "reserved_by IS NOT NULL AND reserved_until >= {now}",
            "stale": "reserved_by IS NOT NULL AND reserved_until < {now}",
        }
        limit = int(cap) + 1

        def read(cur: Cursor) -> dict[str, StateCounts]:
            out: dict[str, StateCounts] = {}
            for queue in queues:
                cur.execute(self.d.q("SELECT COUNT(*) AS seen, SUM(CASE WHEN available_at <= {now} THEN 1 ELSE 0 END) "
                                   "AS due, MIN(CASE WHEN available_at <= {now} THEN available_at END) AS first_due "
                                   "FROM (SELECT available_at FROM {jobs} WHERE queue = {p} AND reserved_by IS NULL "
                                   "AND blocked_by IS NULL LIMIT {p}) waiting"), (queue, int(sample) + 1))
                sampled = fetch_row(cur) or _NONE_WAITING
                seen, due, first_due = int(sampled["seen"]), int(sampled["due"] or 0), sampled["first_due"]
                oldest_due = self.d.to_datetime(first_due) if first_due is not None and seen <= sample else None
                counts = {"ready": due, "delayed": seen - due}
                at_least = {"ready", "delayed"} if seen > sample else set()
                for state, condition in where.items():
                    cur.execute(self.d.q("SELECT COUNT(*) AS n FROM (SELECT 1 FROM {jobs} WHERE queue = {p} AND "
                                         + condition + " LIMIT {p}) capped"), (queue, limit))
                    counts[state] = int(scalar(cur))
                cur.execute(self.d.q("SELECT COUNT(*) AS n FROM (SELECT 1 FROM {failed} WHERE queue = {p} "
                                     "LIMIT {p}) capped"), (queue, limit))
                counts["failed"] = int(scalar(cur))
                at_least |= {k for k, v in counts.items() if v > cap}
                out[queue] = StateCounts(counts, frozenset(at_least), oldest_due)
            return out

        return self.db.run(read)

    def held_jobs(self, limit: int = COUNT_CAP) -> dict[str, list[int]]:
        """Ids of the jobs each worker holds (running or stale), at most ``limit`` in all.

        One read through the lease index for every worker at once: asking per worker
        (``reserved_by``) scanned the whole jobs table once a worker on MySQL, which has no
        partial index and no index on the owner (680 ms for eight workers and a million jobs).
        Every reserved row has a lease end, so ``reserved_until IS NOT NULL`` is a range of the
        lease index everywhere."""

        def read(cur: Cursor) -> dict[str, list[int]]:
            cur.execute(self.d.q("SELECT reserved_by, id FROM {jobs} WHERE reserved_until IS NOT NULL "
                               "AND reserved_by IS NOT NULL ORDER BY reserved_until LIMIT {p}"), (int(limit),))
            out: dict[str, list[int]] = {}
            for r in fetch_rows(cur):
                out.setdefault(r["reserved_by"], []).append(int(r["id"]))
            return {owner: sorted(ids) for owner, ids in out.items()}

        return self.db.run(read)

    def running_now(self, limit: int = 500) -> list[tuple[Any, ...]]:
        """``(owner, id, name, queue, reserved_at, reserved_until, progress)`` of the jobs workers hold
        (running or stale), at most ``limit``, read through the lease index as :meth:`held_jobs`."""

        def read(cur: Cursor) -> list[tuple[Any, ...]]:
            cur.execute(self.d.q("SELECT reserved_by, id, name, queue, reserved_at, reserved_until, progress "
                                 "FROM {jobs} WHERE reserved_until IS NOT NULL AND reserved_by IS NOT NULL "
                                 "ORDER BY reserved_until LIMIT {p}"), (int(limit),))
            t = self.d.to_datetime
            return [(r["reserved_by"], int(r["id"]), r["name"], r["queue"],
                     None if r["reserved_at"] is None else t(r["reserved_at"]), t(r["reserved_until"]), r["progress"])
                    for r in fetch_rows(cur)]

        return self.db.run(read)

    def recent_failures(self, limit: int = 20) -> list[tuple[Any, ...]]:
        """The newest failed attempts of the error history (every failed run writes one):
        ``(job_id, attempt, failed_at, error_type, error_message, name, queue)``, newest first; the
        name and queue from wherever the job is now (None once it is gone)."""

        def read(cur: Cursor) -> list[tuple[Any, ...]]:
            cur.execute(self.d.q(
                "SELECT x.job_id AS job_id, x.attempt AS attempt, x.failed_at AS failed_at, "
                "x.error_type AS error_type, " + _prefix_sql("x.error_message", 300) + " AS error_message, "
                "COALESCE(j.name, f.name, r.name) AS name, COALESCE(j.queue, f.queue, r.queue) AS queue FROM "
                "(SELECT id, job_id, attempt, failed_at, error_type, error_message FROM {job_errors} "
                "ORDER BY id DESC LIMIT {p}) x LEFT JOIN {jobs} j ON j.id = x.job_id "
                "LEFT JOIN {failed} f ON f.id = x.job_id LEFT JOIN {results} r ON r.id = x.job_id ORDER BY x.id DESC"),
                (int(limit),))
            t = self.d.to_datetime
            return [(int(r["job_id"]), int(r["attempt"]), t(r["failed_at"]), r["error_type"], r["error_message"],
                     r["name"], r["queue"]) for r in fetch_rows(cur)]

        return self.db.run(read)

    def recent_outcomes(self, limit: int = 20) -> list[tuple[Any, ...]]:
        """The newest kept outcomes (results rows: jobs that keep their result, cancelled jobs,
        workflow steps): ``(id, name, queue, state, finished_at, message)``, by id, newest first."""

        def read(cur: Cursor) -> list[tuple[Any, ...]]:
            cur.execute(self.d.q("SELECT id, name, queue, state, finished_at, " + _prefix_sql("message", 300)
                                 + " AS message FROM {results} ORDER BY id DESC LIMIT {p}"), (int(limit),))
            t = self.d.to_datetime
            return [(int(r["id"]), r["name"], r["queue"], r["state"], t(r["finished_at"]), r["message"])
                    for r in fetch_rows(cur)]

        return self.db.run(read)

    def active_queues(self) -> list[str]:
        """Queues that hold a job or a dead-letter entry now, had runs in the last week, or have a row
        in the queues table: a queue filled with ``using(queue=...)`` that no worker serves is exactly
        the pile-up an operator must see."""

        def read(cur: Cursor) -> list[str]:
            cur.execute(self.d.q("SELECT DISTINCT queue FROM {stats} WHERE minute >= {now_plus}"), (-7 * 86400.0,))
            found: set[str] = {r["queue"] for r in fetch_rows(cur)}
            cur.execute(self.d.q("SELECT name FROM {queues}"))
            found.update(r["name"] for r in fetch_rows(cur))
            return sorted(found | self.d.queues_in_use(cur))

        return self.db.run(read)

    # ------------------------------------------------------------------ dead letter
    def _failed_where(self, queue: str | None, name: str | None, text: str | None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if queue:
            clauses.append("queue = {p}")
            params.append(queue)
        if name:
            clauses.append("name LIKE {p}" + self.d.like_escape)
            params.append(f"%{like_pattern(name)}%")
        if text:
            clauses.append("(payload LIKE {p}" + self.d.like_escape + " OR error_message LIKE {p}" + self.d.like_escape
                           + " OR error_type LIKE {p}" + self.d.like_escape + " OR label LIKE {p}" + self.d.like_escape
                           + ")")
            params += [f"%{like_pattern(text)}%"] * 4
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def search_failed(self, *, queue: str | None = None, name: str | None = None, text: str | None = None,
                      before_id: int | None = None, limit: int = 50, edge_id: int | None = None
                      ) -> list[FailedJobRow]:
        """One keyset page of the dead letter, newest first; ``edge_id`` as in :meth:`search_jobs`."""
        def read(cur: Cursor) -> list[FailedJobRow]:
            where, params = self._failed_where(queue, name, text)
            where, params = _keyset(where, params, before_id, None, edge_id, False)
            cur.execute(self.d.q("SELECT " + FAILED_COLUMNS + " FROM {failed}" + where + " ORDER BY id DESC LIMIT {p}"),
                        [*params, int(limit)])
            return [FailedJobRow.from_row(r, self.d.to_datetime) for r in cur.fetchall()]

        return self.db.run(read)

    def count_failed(self, *, queue: str | None = None, name: str | None = None, text: str | None = None,
                     cap: int | None = COUNT_CAP, before_id: int | None = None, edge_id: int | None = None) -> int:
        def read(cur: Cursor) -> int:
            where, params = self._failed_where(queue, name, text)
            where, params = _keyset(where, params, before_id, None, edge_id, False)
            if cap is None:
                cur.execute(self.d.q("SELECT COUNT(*) AS n FROM {failed}" + where), params)
            else:
                cur.execute(self.d.q("SELECT COUNT(*) AS n FROM (SELECT 1 FROM {failed}" + where
                                     + " LIMIT {p}) capped"), [*params, int(cap) + 1])
            return int(scalar(cur))

        return self.db.run(read)

    def failed_ids(self, *, queue: str | None = None, name: str | None = None, text: str | None = None,
                   limit: int = 100_000) -> list[int]:
        """Ids of the dead-letter entries a filter matches (for bulk retry and forget)."""

        def read(cur: Cursor) -> list[int]:
            where, params = self._failed_where(queue, name, text)
            cur.execute(self.d.q("SELECT id FROM {failed}" + where + " ORDER BY id LIMIT {p}"), [*params, int(limit)])
            return [int(r["id"]) for r in fetch_rows(cur)]

        return self.db.run(read)

    def failure_groups(self, *, queue: str | None = None, name: str | None = None, text: str | None = None,
                       limit: int = 50, newest: int = GROUPED_NEWEST, edge_id: int | None = None
                       ) -> list[FailureGroup]:
        """The newest ``newest`` dead-letter entries grouped by job and error (type and the start
        of the message): bounded work however long the dead letter is (a text search: within
        the window that ``edge_id`` ends)."""

        def read(cur: Cursor) -> list[FailureGroup]:
            where, params = self._failed_where(queue, name, text)
            where, params = _keyset(where, params, None, None, edge_id, False)
            msg = _prefix_sql("error_message", 200)
            cur.execute(self.d.q(f"SELECT name, error_type, {msg} AS msg, COUNT(*) AS entries, "
                               "MAX(failed_at) AS last_failed_at, MAX(id) AS example_id "
                               "FROM (SELECT id, name, error_type, error_message, failed_at FROM {failed}" + where +
                               " ORDER BY id DESC LIMIT {p}) newest" + f" GROUP BY name, error_type, {msg} "
                               "ORDER BY COUNT(*) DESC, MAX(id) DESC LIMIT {p}"), [*params, int(newest), int(limit)])
            return [FailureGroup(r["name"], r["error_type"], r["msg"], int(r["entries"]),
                                 self.d.to_datetime(r["last_failed_at"]), int(r["example_id"]))
                    for r in fetch_rows(cur)]

        return self.db.run(read)

    # ------------------------------------------------------------------ why is a job waiting
    def dependencies_of(self, job_id: int, limit: int = 20) -> list[tuple[str, int]]:
        """The jobs a blocked job still waits for, and where each is: "jobs", "failed",
        "cancelled" or "gone" (finished: the next sweep counts it off)."""

        def read(cur: Cursor) -> list[tuple[str, int]]:
            cur.execute(self.d.q("SELECT parent_id FROM {dependencies} WHERE child_id = {p} ORDER BY parent_id "
                                 "LIMIT {p}"), (job_id, int(limit)))
            out: list[tuple[str, int]] = []
            for parent in [int(r["parent_id"]) for r in fetch_rows(cur)]:
                where = "gone"
                for table in ("jobs", "failed"):
                    cur.execute(self.d.q(f"SELECT 1 FROM {{{table}}} WHERE id = {{p}}"), (parent,))
                    if fetch_row(cur) is not None:
                        where = table
                        break
                else:
                    cur.execute(self.d.q("SELECT state FROM {results} WHERE id = {p}"), (parent,))
                    where = "cancelled" if scalar(cur) == "cancelled" else "gone"
                out.append((where, parent))
            return out

        return self.db.run(read)

    def group_running(self, group: str) -> int:
        """Admitted runs of a concurrency group whose lease is alive."""

        def read(cur: Cursor) -> int:
            cur.execute(self.d.q("SELECT COUNT(*) AS n FROM {group_runs} g JOIN {jobs} j ON j.id = g.job_id WHERE "
                               "g.name = {p} AND j.reserved_by IS NOT NULL AND j.reserved_until >= {now} "
                               "AND j.admitted_at >= j.reserved_at"), (group,))
            return int(scalar(cur))

        return self.db.run(read)

    def rate_starts(self, name: str, period: float) -> int:
        def read(cur: Cursor) -> int:
            cur.execute(self.d.q("SELECT COUNT(*) AS n FROM {rate_starts} WHERE name = {p} "
                                 "AND started_at > {now_plus}"), (name, -float(period)))
            return int(scalar(cur))

        return self.db.run(read)

    def jobs_by_ids(self, ids: Sequence[int]) -> list[JobRow]:
        if not ids:
            return []

        def read(cur: Cursor) -> list[JobRow]:
            cur.execute(self.d.q("SELECT " + JOB_COLUMNS + " FROM {jobs} WHERE id IN (") + self.d.marks(ids) + ")",
                        list(ids))
            return [JobRow.from_row(r, self.d.to_datetime) for r in cur.fetchall()]

        return self.db.run(read)


def first_ready(d: Dialect, cur: Cursor, queues: Iterable[str]) -> dict[str, datetime]:
    """Per queue, when its oldest ready job became due (``Dialect.first_ready_sql``: its first 1,000
    ready jobs by id); a queue with none is left out.  The overview and the alerts both ask this."""
    out: dict[str, datetime] = {}
    for queue in queues:
        cur.execute(d.q(d.first_ready_sql), (queue,))
        due = scalar(cur)
        if due is not None:
            out[queue] = d.to_datetime(due)
    return out


def job_filter_sql(d: Dialect, queue: str | None, state: str | None, name: str | None, text: str | None
                   ) -> tuple[str, list[Any]]:
    """The WHERE clause (and its parameters) of the jobs lists' filter: queue, state, job name, text
    (arguments, last error or label); empty when nothing filters."""
    clauses: list[str] = []
    params: list[Any] = []
    if queue:
        clauses.append("queue = {p}")
        params.append(queue)
    if name:
        clauses.append("name LIKE {p}" + d.like_escape)
        params.append(f"%{like_pattern(name)}%")
    if text:
        escape = d.like_escape
        clauses.append("(payload LIKE {p}" + escape + " OR last_error LIKE {p}" + escape
                       + " OR label LIKE {p}" + escape + ")")
        params += [f"%{like_pattern(text)}%"] * 3
    if state in STATE_SQL:
        clauses.append(STATE_SQL[state])
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


STATE_SQL = {
    "ready": "reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now}",
    "delayed": "reserved_by IS NULL AND blocked_by IS NULL AND available_at > {now}",
    "blocked": "reserved_by IS NULL AND blocked_by IS NOT NULL",
    "running": "reserved_by IS NOT NULL AND reserved_until >= {now}",
    "stale": "reserved_by IS NOT NULL AND reserved_until < {now}",
}
"""Each state of a job in the jobs table, as SQL over its row."""


def group_failures(rows: Sequence[FailedJobRow], limit: int = 50) -> list[FailureGroup]:
    """:meth:`InsightStore.failure_groups` of rows already read: when a page of the dead letter holds
    every entry its groups would read (fewer than a page, from the newest), grouping them here
    spares a second pass over the search window (on MariaDB, 100 ms for a text no entry holds)."""
    found: dict[tuple[str, str, str], list[Any]] = {}
    for r in rows:
        key = (r.name, r.error_type, (r.error_message or "")[:200])
        group = found.get(key)
        if group is None:
            found[key] = [1, r.failed_at, r.id]
        else:
            group[0] += 1
            group[1] = max(group[1], r.failed_at)
            group[2] = max(group[2], r.id)
    ordered = sorted(found.items(), key=lambda kv: (-kv[1][0], -kv[1][2]))[:limit]
    return [FailureGroup(name, etype, message, n, last, example) for (name, etype, message), (n, last, example)
            in ordered]


def _prefix_sql(column: str, length: int) -> str:
    return f"SUBSTR({column}, 1, {int(length)})"


def _keyset(where: str, params: list[Any], before_id: int | None, after_id: int | None, edge_id: int | None,
            oldest_first: bool) -> tuple[str, list[Any]]:
    """Add a page's id bounds (and a search window's edge) to a WHERE clause."""
    bounds = []
    if before_id is not None:
        bounds.append(("id < {p}", before_id))
    if after_id is not None:
        bounds.append(("id > {p}", after_id))
    if edge_id is not None:
        bounds.append(("id <= {p}" if oldest_first else "id >= {p}", edge_id))
    for clause, value in bounds:
        where += (" AND " if where else " WHERE ") + clause
        params = [*params, value]
    return where, params
