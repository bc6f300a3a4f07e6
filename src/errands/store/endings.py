"""The one store part that ends attempts: it applies settlements, every terminal write in one place.

A settlement (:mod:`errands.core.endings`: completed, retry at, snoozed, buried, cancelled) is
decided from the job's policy; this part writes it.  Every write is conditional on the run still
being held by its worker (``reserved_by``), so a worker that lost its lease changes nothing, and
every move between tables is one transaction that locks the rows it moves.  The supervisor's and
recovery's verbs read the rows they end under a lock, decide each with
:func:`errands.core.endings.decide` and apply it in the same transaction; the worker decides first
(its claim gave it the facts) and applies here.

Invariants kept here (see docs/architecture.md): a job is in ``jobs``, in ``failed_jobs`` or
finished, never in two; attempts were counted at claim time, so a job whose worker dies each time
reaches the dead letter instead of looping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core.columns import CLAIMED, names
from ..core.endings import (
    Buried,
    CancelledRun,
    Completed,
    Ended,
    Expired,
    HeldBack,
    PolicyLookup,
    RecoveryReport,
    Result,
    Resumed,
    RetryAt,
    RunOutcome,
    Settlement,
    Snoozed,
    decide,
    expired,
    overdue,
)
from ..core.limits import clamp_delay
from ..core.payload import safe_text
from ..core.rows import (
    FLAG_BATCH,
    FLAG_DEADLINE,
    FLAG_DEPENDENTS,
    FLAG_RESULT,
    FLAG_UNIQUE_PERIOD,
    ClaimedJob,
    Failure,
    JobState,
    as_int,
)
from ..core.runlogs import RunLog
from .database import Database
from .driver import Cursor, fetch_row, fetch_rows
from .steps import ERROR_MESSAGE_CAP, Steps

_CLAIMED = names(CLAIMED)
LOST_MESSAGE = "the worker stopped heart-beating during this attempt"
LOST_DEAD_MESSAGE = ("the worker stopped heart-beating (it died or hung) during the last attempt, and no attempts "
                     "are left")


class EndingStore:
    """Applies settlements (see the module's docstring)."""

    def __init__(self, db: Database, steps: Steps) -> None:
        self.db = db
        self.d = db.dialect
        self.steps = steps

    # ------------------------------------------------------------------ the worker's runs
    def complete(self, owner: str, ids: Sequence[int]) -> int:
        """Plain successes (a ``Completed`` with nothing to record: no result, batch or dependant):
        one DELETE of the runs still ``owner``'s; returns how many were.  Anything else that
        succeeded goes through :meth:`apply`.  (A dependant enqueued while its dependency was
        already running is released by ``sweep_blocked``.)"""
        if not ids:
            return 0

        def delete(cur: Cursor) -> int:
            match, params = self.d.ids_match(ids)
            cur.execute(self.d.q("DELETE FROM {jobs} WHERE reserved_by = {p} AND ") + match, [owner, *params])
            return int(cur.rowcount)

        return self.db.run(delete)

    def apply(self, owner: str | None, settlements: Sequence[Settlement],
              logs: Sequence[RunLog] = ()) -> list[Settlement]:
        """Write settlements in one transaction; returns those that applied, as written (the others'
        runs are no longer ``owner``'s: their lease lapsed and another worker holds them, or they
        ended; a :class:`HeldBack` past its grace is written, and returned, as :class:`Buried`).
        ``owner=None``: whoever holds the job (tools and tests).  ``logs``: the runs' log records,
        written (one INSERT) for the settlements that applied."""
        if not settlements:
            return []
        return self.db.run(lambda cur: self.apply_in(cur, owner, settlements, logs), write=True)

    def apply_in(self, cur: Cursor, owner: str | None, settlements: Sequence[Settlement],
                 logs: Sequence[RunLog] = ()) -> list[Settlement]:
        """:meth:`apply` on the caller's transaction."""
        completed = [s for s in settlements if isinstance(s, Completed)]
        done = set(self._complete_in(cur, owner, completed)) if completed else set()
        applied: list[Settlement] = []
        for s in settlements:
            written: Settlement | None = s
            if isinstance(s, Completed):
                written = s if s.job_id in done else None
            elif isinstance(s, RetryAt):
                written = s if self._retry(cur, owner, s) else None
            elif isinstance(s, Snoozed):
                written = s if self._snooze(cur, owner, s) else None
            elif isinstance(s, Resumed):
                written = s if self._resume(cur, owner, s) else None
            elif isinstance(s, (Buried, Expired)):
                written = s if self._bury(cur, owner, s) else None
            elif isinstance(s, HeldBack):
                written = self._hold_back(cur, owner, s)
            else:
                written = s if self._cancel(cur, owner, s) else None
            if written is not None:
                applied.append(written)
        if logs and applied:
            ended = {s.job_id for s in applied}
            self.steps.record_run_logs(cur, owner, [log for log in logs if log.job_id in ended])
        return applied

    def bury(self, owner: str | None, job_id: int, error_type: str, error_message: str, *,
             traceback: str | None = None) -> bool:
        """Move one job to the dead letter (``owner=None``: whoever holds it, or a waiting job)."""
        return bool(self.apply(owner, [Buried(job_id, 0, error_type, error_message, traceback)]))

    # ------------------------------------------------------------------ runs whose worker is gone
    def end_held(self, owner: str, ids: Sequence[int], outcome_of: Callable[[ClaimedJob], RunOutcome],
                 policies: PolicyLookup) -> list[Ended]:
        """End the current attempt of jobs ``owner`` holds (the supervisor, for a process it killed
        at a hard timeout or that died): each is described by ``outcome_of(row)``, decided from
        its job's policy and applied, in one transaction that locks them."""
        if not ids:
            return []

        def end(cur: Cursor) -> list[Ended]:
            cur.execute(self.d.q("SELECT " + _CLAIMED + " FROM {jobs} WHERE reserved_by = {p} AND id IN (")
                        + self.d.marks(ids) + ")" + self.d.lock_rows, [owner, *ids])
            rows = [ClaimedJob.read(r) for r in cur.fetchall()]
            return self._decide_and_apply(cur, rows, outcome_of, policies)

        return self.db.run(end, write=True)

    def recover_stale(self, policies: PolicyLookup, job_ids: Sequence[int] | None = None) -> RecoveryReport:
        """End the attempts whose lease expired (their worker died or hung): back in line at once
        while attempts are left, else the dead letter.

        Attempts were counted at claim time, so a job that kills its worker every time reaches
        ``max_attempts`` and lands in the dead letter instead of looping.  Rows another recovery
        is ending are skipped (``SKIP LOCKED``)."""

        def recover(cur: Cursor) -> RecoveryReport:
            if job_ids is not None and not job_ids:
                return RecoveryReport([], [])
            sql = self.d.q("SELECT " + _CLAIMED + " FROM {jobs} WHERE reserved_by IS NOT NULL "
                           "AND reserved_until < {now}")
            params: list[int] = []
            if job_ids is not None:
                sql += " AND id IN (" + self.d.marks(job_ids) + ")"
                params = list(job_ids)
            cur.execute(sql + self.d.lock_rows_skip, params)
            rows = [ClaimedJob.read(r) for r in cur.fetchall()]
            ended = self._decide_and_apply(cur, rows, _lost, policies)
            return RecoveryReport([row.id for row, s in ended if isinstance(s, RetryAt)],
                                  [row.id for row, s in ended if isinstance(s, Buried)], ended)

        return self.db.run(recover, write=True)

    # ------------------------------------------------------------------ expiry and deadlines
    def deadlines(self, ids: Sequence[int]) -> dict[int, float]:
        """Seconds left before each job's deadline, by the database's clock (jobs without one, or gone,
        are left out): what :func:`~errands.core.endings.decide` needs of a failed run of a job flagged
        ``FLAG_DEADLINE`` (the claim returns no times)."""
        if not ids:
            return {}
        return self.db.run(lambda cur: self._deadlines(cur, ids), write=False)

    def _deadlines(self, cur: Cursor, ids: Sequence[int]) -> dict[int, float]:
        match, params = self.d.ids_match(ids)
        cur.execute(self.d.q("SELECT id, deadline_at, {now} AS now FROM {jobs} WHERE deadline_at IS NOT NULL AND ")
                    + match, params)
        to_datetime = self.d.to_datetime
        return {int(r["id"]): (to_datetime(r["deadline_at"]) - to_datetime(r["now"])).total_seconds()
                for r in fetch_rows(cur)}

    def end_overdue(self, limit: int = 500) -> list[Ended]:
        """End waiting jobs that can no longer start (the maintenance pass; the claim already refuses
        them): those past their expiry as expired, those past their deadline as DeadlineExceeded, both
        in the dead letter.  At most ``limit`` of each kind a call, through their partial indexes
        (MySQL: a scan of the jobs table, which is why workers run it once a minute); rows another
        transaction holds are skipped.  Returns the endings, for :func:`~errands.core.endings.announce`."""

        def end(cur: Cursor) -> list[Ended]:
            ended: list[Ended] = []
            for column in ("expires_at", "deadline_at"):
                cur.execute(self.d.q("SELECT " + _CLAIMED + ", " + column + " AS due, last_error FROM {jobs} WHERE "
                                     + column + " <= {now} AND reserved_by IS NULL ORDER BY " + column
                                     + " LIMIT " + str(int(limit))) + self.d.lock_rows_skip)
                found = [(ClaimedJob.read(r[:len(CLAIMED)]), r[len(CLAIMED)], r[len(CLAIMED) + 1])
                         for r in cur.fetchall()]
                for row, due, last_error in found:
                    moment = self.d.to_datetime(due)
                    settlement = expired(row, moment) if column == "expires_at" else overdue(row, moment, last_error)
                    if self.steps.bury_locked(cur, "id = {p} AND reserved_by IS NULL", [row.id],
                                              settlement.error_type, settlement.error_message) == 1:
                        ended.append((row, settlement))
            return ended

        return self.db.run(end, write=True)

    def _decide_and_apply(self, cur: Cursor, rows: list[ClaimedJob], outcome_of: Callable[[ClaimedJob], RunOutcome],
                          policies: PolicyLookup) -> list[Ended]:
        ended: list[Ended] = []
        flagged = [row.id for row in rows if as_int(row.flags) & FLAG_DEADLINE]
        left = self._deadlines(cur, flagged) if flagged else {}
        for row in rows:
            outcome = outcome_of(row)
            if row.id in left:
                outcome = outcome._replace(deadline_in=left[row.id])
            settlement = decide(outcome, policies.policy_of(row.name))
            if self.apply_in(cur, row.reserved_by, [settlement]):
                ended.append((row, settlement))
        return ended

    # ------------------------------------------------------------------ each kind of ending
    def _owned(self, owner: str | None) -> tuple[str, list[str]]:
        """`` AND reserved_by = ?`` and its parameter (nothing for ``None``: whoever holds it)."""
        return ("", []) if owner is None else (self.d.q(" AND reserved_by = {p}"), [owner])

    def _retry(self, cur: Cursor, owner: str | None, s: RetryAt) -> bool:
        mine, param = self._owned(owner)
        cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                             "available_at = {now_plus}, last_error = {p} WHERE id = {p}") + mine,
                    [clamp_delay(s.delay), safe_text(f"{s.error_type}: {s.error_message}", ERROR_MESSAGE_CAP),
                     s.job_id, *param])
        if cur.rowcount != 1:
            return False
        self.steps.record_errors(cur, [Failure(s.job_id, s.attempt, s.error_type, s.error_message, s.traceback)])
        return True

    def _snooze(self, cur: Cursor, owner: str | None, s: Snoozed) -> bool:
        """Back in line with its attempt given back (attempts count at claim) and one more snooze."""
        return self._give_back(cur, owner, s.job_id, s.delay, "snoozes")

    def _resume(self, cur: Cursor, owner: str | None, s: Resumed) -> bool:
        """Back in line at once with its attempt given back and one more resumption; its checkpoint stays."""
        return self._give_back(cur, owner, s.job_id, s.delay, "resumptions")

    def _give_back(self, cur: Cursor, owner: str | None, job_id: int, delay: float, counter: str) -> bool:
        """Unreserve a run with its attempt given back, due after ``delay``, counting it in ``counter``
        (``snoozes`` or ``resumptions``: a column name of this module's, never a caller's text)."""
        mine, param = self._owned(owner)
        cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                             f"available_at = {{now_plus}}, {counter} = {counter} + 1, "
                             "attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END WHERE id = {p}") + mine,
                    [clamp_delay(delay), job_id, *param])
        return cur.rowcount == 1

    def _hold_back(self, cur: Cursor, owner: str | None, s: HeldBack) -> Settlement | None:
        """Back in line with the attempt refunded while the job is younger than its grace (by the
        database's clock), for a worker that knows its name; once older, the dead letter."""
        mine, param = self._owned(owner)
        cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                             "available_at = {now_plus}, last_error = {p}, "
                             "attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END "
                             "WHERE id = {p} AND created_at > {now_plus}") + mine,
                    [clamp_delay(s.delay), safe_text(f"{s.error_type}: {s.error_message}", ERROR_MESSAGE_CAP),
                     s.job_id, -float(s.grace), *param])
        if cur.rowcount == 1:
            return s
        buried = Buried(s.job_id, 0, s.error_type, f"{s.error_message} (held back for {s.grace:g}s after its "
                        "enqueue for a worker that registers it; none took it)")
        return buried if self._bury(cur, owner, buried) else None

    def _bury(self, cur: Cursor, owner: str | None, s: Buried | Expired) -> bool:
        where, params = ("id = {p}", [s.job_id]) if owner is None else ("id = {p} AND reserved_by = {p}",
                                                                       [s.job_id, owner])
        return self.steps.bury_locked(cur, where, params, s.error_type, s.error_message, s.traceback) == 1

    def _cancel(self, cur: Cursor, owner: str | None, s: CancelledRun) -> bool:
        """Record a run that stopped because it was cancelled, and delete it."""
        mine, param = self._owned(owner)
        cur.execute(self.d.q("SELECT queue, name, attempts, flags, batch_id, label FROM {jobs} WHERE id = {p}") + mine
                    + self.d.lock_rows, [s.job_id, *param])
        row = fetch_row(cur)
        if row is None:
            return False
        self.steps.end_cancelled(cur, s.job_id, row["queue"], row["name"], int(row["attempts"]), int(row["flags"]),
                                 row["batch_id"], s.record_ttl, s.message, row["label"])
        return True

    def _complete_in(self, cur: Cursor, owner: str | None, runs: Sequence[Completed]) -> list[int]:
        """Successful runs, with what they must record: a kept result, their batch's count, their
        dependants released; in the caller's transaction with their delete, so a result is never
        lost, a batch never counts a run twice, and dependants are released at once."""
        by_id = {r.job_id: r for r in runs}
        ids = list(by_id)
        mine, param = self._owned(owner)
        cur.execute(self.d.q("SELECT id, queue, name, attempts, flags, batch_id, label FROM {jobs} WHERE id IN (")
                    + self.d.marks(ids) + ")" + mine + self.d.lock_rows, [*ids, *param])
        rows = fetch_rows(cur)
        if not rows:
            return []
        for r in rows:
            run, flags = by_id[r["id"]], int(r["flags"] or 0)
            if flags & FLAG_RESULT:
                self.steps.record_result(cur, r["id"], r["queue"], r["name"], JobState.SUCCEEDED, run.result,
                                         int(r["attempts"]), r["batch_id"], run.result_ttl, label=r["label"],
                                         flags=flags)
        mine_ids = [r["id"] for r in rows]
        cur.execute(self.d.q("DELETE FROM {jobs} WHERE id IN (") + self.d.marks(mine_ids) + ")", mine_ids)
        self.steps.stamp_unique_expiry(cur, [r["id"] for r in rows if int(r["flags"] or 0) & FLAG_UNIQUE_PERIOD])
        batches: dict[int, int] = {}
        for r in rows:
            if int(r["flags"] or 0) & FLAG_BATCH and r["batch_id"] is not None:
                batches[int(r["batch_id"])] = batches.get(int(r["batch_id"]), 0) + 1
        for batch_id, count in sorted(batches.items()):
            self.steps.count_in_batch(cur, batch_id, done=count, failed=0)
        parents = [r["id"] for r in rows if int(r["flags"] or 0) & FLAG_DEPENDENTS]
        if parents:
            self.steps.unblock(cur, parents)
        return mine_ids


def _lost(row: ClaimedJob) -> RunOutcome:
    """How recovery describes a run whose lease expired."""
    return RunOutcome(row, Result.LOST, 0.0, "errands.LeaseExpired", LOST_MESSAGE, dead_message=LOST_DEAD_MESSAGE)
