"""Keeping a limit busy (issue 17), by counts rather than timings, on every backend.

A concurrency group's freed slot passes to a waiting run as soon as the run that held it is
recorded (the worker that records it wakes the group's refused runs); a rate limit's refused runs
come back each when the window has room for it.  The limits themselves are never exceeded: the
many-process tests in test_many_processes.py check that with real workers.
"""

from __future__ import annotations

import time
from typing import Any

from errands import Errands
from errands.core.endings import Result, RetryAt, RunOutcome
from errands.core.rows import Limit
from errands.store.features import RATE_MARGIN
from errands.worker.runner import Worker, WorkerSettings


def _rows(app: Errands, sql: str, *params: Any) -> list[tuple]:
    def read(cur: Any) -> list[tuple]:
        cur.execute(app.store.dialect.q(sql), params)
        return [tuple(r) for r in cur.fetchall()]

    return app.store.db.run(read)


def _seconds_until_due(app: Errands, job_id: int) -> float:
    row = app.store.jobs.get_job(job_id)
    return (row.available_at - app.store.now()).total_seconds()


def _worker(app: Errands) -> Worker:
    """A worker whose main-thread parts the test drives by hand (no threads started)."""
    return Worker(app, WorkerSettings(queues=("default",), concurrency=4, prefetch=0))


def test_a_freed_group_slot_goes_to_a_waiting_run_at_the_next_claim(app):
    @app.job(name="g", concurrency_limit=2)
    def g(n: int) -> None: ...

    for n in range(4):
        g.enqueue(n)
    first, free = _worker(app), _worker(app)
    assert len(first.admission.take(4)) == 2  # two run, two wait
    assert free.admission.take(4) == []  # the group is full: nothing for another worker
    # One run ends and its worker records it.
    row = first.state.work.get()
    first.settling.record(row, RunOutcome(row, Result.OK, 0.01))
    first.settling.settle()
    assert app.store.jobs.get_job(row.id) is None
    # With two jobs waiting in a group of limit 2 and a worker free, the next claim takes one
    # (before, the refused runs stayed away for a fixed delay whatever freed up meanwhile).
    taken = free.admission.take(4)
    assert len(taken) == 1 and taken[0].name == "g"
    assert free.admission.take(4) == []  # and only one: the group is full again


def test_every_ending_of_a_group_run_wakes_a_waiter(app):
    @app.job(name="g", concurrency_limit=1)
    def g(n: int) -> None: ...

    class Boom(Exception):
        pass

    ids = [g.enqueue(n).id for n in range(3)]
    worker = _worker(app)
    [running] = worker.admission.take(4)
    # A failed run frees its slot too (here it goes back with a backoff): a waiter is due at once.
    worker.state.work.get()
    worker.settling.record(running, RunOutcome(running, Result.ERROR, 0.01, "Boom", "boom", Boom("boom")))
    worker.settling.settle()
    due = [job_id for job_id in ids if job_id != running.id and _seconds_until_due(app, job_id) <= 0]
    assert len(due) == 1
    assert _seconds_until_due(app, running.id) > 0  # its own backoff is left alone


def test_waking_a_group_never_cuts_a_retry_backoff(app):
    @app.job(name="g", concurrency_limit=1)
    def g() -> None: ...

    job = g.enqueue()
    [row] = app.store.jobs.claim("w", ["default"], 1, lease=30)
    assert app.store.features.admit("w", [(row.id, [Limit("concurrency", "g", 1)])]) == ([row.id], [])
    assert app.store.endings.apply("w", [RetryAt(row.id, row.attempts, 600.0, "ValueError", "boom")])
    assert app.store.features.wake_group_waiters({"g": 5}) == 0
    assert _seconds_until_due(app, job.id) > 500


def test_refused_rate_limited_runs_come_back_each_when_the_window_has_room(app):
    @app.job(name="r", rate_limit="2/s")
    def r(n: int) -> None: ...

    for n in range(5):
        r.enqueue(n)
    rows = app.store.jobs.claim("w", ["default"], 5, lease=30)
    decision = app.store.features.admission("w", [(row.id, [Limit("rate", "r", 2, 1.0)]) for row in rows])
    assert len(decision.admitted) == 2 and len(decision.waits) == 3
    # The next two fit when the two starts leave the window (one period); the fifth a period later,
    # when the two starts of the window after it have left too.
    third, fourth, fifth = (decision.waits[row.id] for row in rows[2:])
    assert 0.9 <= third <= 1.1 and 0.9 <= fourth <= 1.1 and 1.9 <= fifth <= 2.1
    assert all(abs(_seconds_until_due(app, row.id) - decision.waits[row.id]) < 0.5 for row in rows[2:])
    granted = _rows(app, "SELECT COUNT(*) FROM {rate_starts} WHERE name = 'r'")[0][0]
    assert granted == 2


def test_a_worker_asks_again_when_the_run_its_limits_refused_is_due(app):
    @app.job(name="r", rate_limit="1/hour")
    def r(n: int) -> None: ...

    r.enqueue(0)
    r.enqueue(1)
    worker = _worker(app)
    now = time.monotonic()
    assert worker.admission.next_due(now) is None
    assert len(worker.admission.take(4)) == 1
    # The claim loop's next claim comes at the latest when the refused run is due, whatever its
    # idle pause (which only ever grows while claims come back empty).
    due = worker.admission.next_due(time.monotonic())
    assert due is not None and 3000 < due - now <= 3601
    assert worker.admission.next_due(due) is None  # once passed, forgotten


def _most_in_any_window(times: list[float], width: float) -> int:
    times = sorted(times)
    best, left = 0, 0
    for right, t in enumerate(times):
        while t - times[left] >= width:
            left += 1
        best = max(best, right - left + 1)
    return best


def test_a_start_about_to_free_is_granted_ahead_and_never_overfills_a_window(app):
    @app.job(name="r", rate_limit="2/100s")
    def r(n: int) -> None: ...

    # The window is full, and both its starts leave it in about 5 s (a long period, so that no
    # start leaves it while the test runs on a slow machine).
    for _ in range(2):
        app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(
            "INSERT INTO {rate_starts} (name, started_at, units) VALUES ('r', {now_plus}, NULL)"), (-95.0,)),
            write=True)
    for n in range(3):
        r.enqueue(n)
    limit = [Limit("rate", "r", 2, 100.0)]
    rows = app.store.jobs.claim("w", ["default"], 3, lease=30)
    assert app.store.features.admit("w", [(row.id, limit) for row in rows])[0] == []  # without ``ahead``
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(
        "UPDATE {jobs} SET available_at = {now} WHERE reserved_by IS NULL")), write=True)
    rows = app.store.jobs.claim("w", ["default"], 3, lease=30)
    decision = app.store.features.admission("w", [(row.id, limit) for row in rows], ahead=10.0)
    # Two are granted the starts the window frees, at the moment it frees them; the third needs a
    # start of the next window and comes back 10 s before that one frees (in about 95 s).
    assert sorted(decision.admitted) == sorted(decision.later) == sorted(row.id for row in rows[:2])
    # (plus the margin that puts the grant a hair after the start leaves: on a quick run the clock
    # has not moved since the starts were written, and the wait is 5 s and that millisecond)
    assert all(0 < wait <= 5.0 + RATE_MARGIN for wait in decision.later.values())
    assert list(decision.waits) == [rows[2].id] and 85 < decision.waits[rows[2].id] <= 95.1
    granted = [app.store.dialect.to_datetime(t).timestamp()
               for (t,) in _rows(app, "SELECT started_at FROM {rate_starts} WHERE name = 'r'")]
    assert len(granted) == 4 and _most_in_any_window(granted, 100.0) == 2


def test_a_worker_holds_a_run_granted_ahead_until_its_start(app, monkeypatch):
    import errands.worker.admission as admission

    @app.job(name="r", rate_limit="1/200s")
    def r(n: int) -> None: ...

    monkeypatch.setattr(admission, "GRANT_AHEAD", 30.0)  # the window's one start leaves it in 10 s
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(
        "INSERT INTO {rate_starts} (name, started_at, units) VALUES ('r', {now_plus}, NULL)"), (-190.0,)),
        write=True)
    job = r.enqueue(0)
    worker = _worker(app)
    before = time.monotonic()
    [row] = worker.admission.take(4)
    assert row.id == job.id
    assert worker.state.not_before[job.id] - before > 5.0  # its runner waits until the start is its


def test_a_worker_is_granted_no_more_rate_limited_starts_than_it_has_idle_runners(app):
    # Issue 26: a start granted beyond the idle runners would wait behind the others, its handler
    # starting well after the moment the database recorded; the next window's prompt starts could
    # then meet it in one period.  The runs beyond the idle runners go back, due at once.
    @app.job(name="r", rate_limit="100/s")
    def r(n: int) -> None: ...

    for n in range(10):
        r.enqueue(n)
    worker = _worker(app)  # four runners, none busy
    taken = worker.admission.take(10)
    assert len(taken) == 4 and sorted(worker.state.not_before) == sorted(row.id for row in taken)
    assert len(_rows(app, "SELECT id FROM {rate_starts} WHERE name = 'r'")) == 4
    waiting = [job for job in app.store.jobs.list_jobs() if job.reserved_by is None]
    assert len(waiting) == 6 and all(_seconds_until_due(app, job.id) <= 0 for job in waiting)
    assert all(job.attempts == 0 for job in waiting)  # given back with their attempt refunded
    # Two runners busy: two more starts, the runs granted a start handed to the runners first.
    worker.state.outstanding = 2
    assert len(worker.admission.take(10)) == 2
    # While rate-limited runs wait for idle runners, the worker prefetches nothing: a buffer that never
    # empties would leave it no idle runner to be granted them for.
    assert worker.admission.capacity() == 4


def test_runs_granted_a_rate_limited_start_go_to_the_runners_before_the_others(app):
    @app.job(name="r", rate_limit="100/s")
    def r(n: int) -> None: ...

    @app.job(name="plain")
    def plain(n: int) -> None: ...

    plain_ids = [plain.enqueue(n).id for n in range(2)]
    limited = r.enqueue(0).id
    worker = _worker(app)
    assert [row.id for row in worker.admission.take(3)] == [limited, *plain_ids]


def test_a_start_is_recorded_a_lead_ahead_and_held_until_then(app):
    @app.job(name="r", rate_limit="100/s")
    def r(n: int) -> None: ...

    job = r.enqueue(0)
    rows = app.store.jobs.claim("w", ["default"], 1, lease=30)
    before = app.store.now()
    decision = app.store.features.admission("w", [(row.id, [Limit("rate", "r", 100, 1.0)]) for row in rows],
                                            lead=5.0)
    # Granted now, but recorded 5 s ahead (the caller holds it until then, from ``decided_at``).
    assert decision.admitted == [job.id] and decision.later == {job.id: 5.0}
    assert decision.decided_at is not None and decision.decided_at <= time.monotonic()
    [(started,)] = _rows(app, "SELECT started_at FROM {rate_starts} WHERE name = 'r'")
    assert 4.9 < (app.store.dialect.to_datetime(started) - before).total_seconds() < 6.0
    [(name, stored, units)] = decision.starts[job.id]
    assert (name, units) == ("r", 1) and app.store.dialect.to_datetime(stored) == app.store.dialect.to_datetime(started)


def test_forgetting_a_start_takes_back_one_of_several_alike(app):
    for _ in range(3):  # three starts of one window at one moment, as one admission's grants can be
        app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(
            "INSERT INTO {rate_starts} (name, started_at, units) VALUES ('r', {p}, NULL)"),
            (app.store.dialect.from_datetime(app.store.now().replace(microsecond=0)),)), write=True)
    [(stored,)] = _rows(app, "SELECT DISTINCT started_at FROM {rate_starts}")
    assert app.store.features.forget_starts([("r", stored, 1)]) == 1
    assert len(_rows(app, "SELECT id FROM {rate_starts}")) == 2
    assert app.store.features.forget_starts([("r", stored, 2), ("other", stored, 1)]) == 0  # units and window match


class _LateOnce:
    """Stands in for START_TOLERANCE: the first run compared with it is late, the others are not."""

    def __init__(self) -> None:
        self.misses = 0

    def __lt__(self, lateness: float) -> bool:  # (``lateness > START_TOLERANCE``)
        self.misses += 1
        return self.misses == 1


def test_a_run_its_runner_reaches_too_late_is_given_back_unrun_and_granted_again(app, monkeypatch):
    import errands.worker.execution as execution

    ran: list[int] = []

    @app.job(name="r", rate_limit="100/s")
    def r(n: int) -> None:
        ran.append(n)

    late = _LateOnce()
    monkeypatch.setattr(execution, "START_TOLERANCE", late)
    job = r.enqueue(7)
    worker = Worker(app, WorkerSettings(queues=("default",), concurrency=1, prefetch=0, burst=True))
    worker.run()
    # It ran once: the late first hand-out was given back (attempt refunded, recorded start taken
    # back) and the job granted a new start.
    assert ran == [7] and late.misses == 2
    assert app.store.jobs.get_job(job.id) is None
    assert len(_rows(app, "SELECT id FROM {rate_starts} WHERE name = 'r'")) == 1
    assert worker.claimed == 1


def test_a_spaced_window_follows_the_previous_one_by_the_period_and_the_spacing(app):
    # Issue 26: with a spacing, a window counts its starts over the period and the spacing (at most a
    # hundredth of the period), so a handler started a little after its recorded start never meets
    # the next window's.  A long period (1000 s, spacing up to 10 s) keeps the test free of timing.
    @app.job(name="r")
    def r(n: int) -> None: ...

    def window(name: str) -> list[Limit]:
        for _ in range(2):  # the window's two starts left the plain window 5 s ago
            app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(
                "INSERT INTO {rate_starts} (name, started_at, units) VALUES ({p}, {now_plus}, NULL)"),
                (name, -1005.0)), write=True)
        return [Limit("rate", name, 2, 1000.0)]

    for n in range(2):
        r.enqueue(n)
    first, second = app.store.jobs.claim("w", ["default"], 2, lease=30)
    plain = app.store.features.admission("w", [(first.id, window("a"))], ahead=30.0)
    assert plain.admitted == [first.id] and plain.later == {first.id: 0.0}  # granted at once
    spaced = app.store.features.admission("w", [(second.id, window("b"))], ahead=30.0, spacing=20.0)
    # Capped at 10 s: the old starts hold the spaced window 5 s more; granted the start it frees then.
    assert spaced.admitted == [second.id] and 0 < spaced.later[second.id] <= 5.0 + RATE_MARGIN


def test_a_missed_start_is_taken_back_once_even_when_its_give_back_is_retried(app, monkeypatch):
    from errands.core.errors import StoreUnavailable

    @app.job(name="r", rate_limit="100/s")
    def r(n: int) -> None: ...

    for n in range(2):
        r.enqueue(n)
    worker = _worker(app)
    first, second = worker.admission.take(4)
    [(name, stored, units)] = worker.state.starts[first.id]
    # Both were granted at the same moment; the first missed its start, the second ran.
    worker.state.work.get()
    worker.state.missed_start(first, worker.state.starts.pop(first.id))
    release = app.store.jobs.release
    calls: list[int] = []

    def failing_once(owner: str, ids: Any, **kw: Any) -> int:
        calls.append(len(ids))
        if len(calls) == 1:
            raise StoreUnavailable("down for a moment")
        return release(owner, ids, **kw)

    monkeypatch.setattr(app.store.jobs, "release", failing_once)
    worker.admission.give_back_missed()  # its start is taken back, the release fails
    worker.state.database_up()
    worker.admission.give_back_missed()  # released now; no second start taken back
    assert calls == [1, 1]
    assert len(_rows(app, "SELECT id FROM {rate_starts} WHERE name = 'r'")) == 1  # the second run's stays
    assert app.store.jobs.get_job(first.id).reserved_by is None


def test_a_run_one_rate_limit_grants_and_a_later_one_refuses_leaves_no_start_behind(app):
    # A job's own limit ("a", room) and its queue's ("b", full): the run does not start now, so the
    # start "a" recorded for it in the same admission is taken back (it stayed, and the window lost
    # a start for a run that never ran).
    @app.job(name="r")
    def r(n: int) -> None: ...

    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(
        "INSERT INTO {rate_starts} (name, started_at, units) VALUES ('b', {now}, NULL)")), write=True)
    r.enqueue(0)
    [row] = app.store.jobs.claim("w", ["default"], 1, lease=30)
    decision = app.store.features.admission("w", [(row.id, [Limit("rate", "a", 5, 1000.0),
                                                            Limit("rate", "b", 1, 1000.0)])])
    assert decision.admitted == [] and row.id in decision.waits and decision.starts == {}
    assert _rows(app, "SELECT id FROM {rate_starts} WHERE name = 'a'") == []
    assert len(_rows(app, "SELECT id FROM {rate_starts} WHERE name = 'b'")) == 1


def test_runs_given_back_unstarted_take_back_their_recorded_starts(app):
    # A quieted or stopping worker gives back the runs no runner started: the starts recorded for
    # them go too, or the window would count starts of runs that never ran (and that run again
    # later, each with a new start).
    @app.job(name="r", rate_limit="100/s")
    def r(n: int) -> None: ...

    for n in range(3):
        r.enqueue(n)
    worker = _worker(app)
    assert len(worker.admission.take(4)) == 3
    assert len(_rows(app, "SELECT id FROM {rate_starts} WHERE name = 'r'")) == 3
    running = worker.state.work.get()  # one of them is running (its runner took its start)
    worker.state.not_before.pop(running.id)
    worker.state.starts.pop(running.id)
    worker._give_back_unstarted()
    assert len(_rows(app, "SELECT id FROM {rate_starts} WHERE name = 'r'")) == 1
    assert worker.state.starts == {} and worker.state.not_before == {}
    assert len([j for j in app.store.jobs.list_jobs() if j.reserved_by is None]) == 2  # released
