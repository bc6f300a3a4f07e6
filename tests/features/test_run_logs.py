"""Per-run logs (issue 27, point 4): the ``logging`` records a run emits in its own thread or task are
kept with its attempt, bounded, behind an off switch, and pruned with the job's error history; on
every backend.  Lines of other threads (the worker's own, a thread the job starts) are not kept."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import drain

from errands import Errands, JobState
from errands.core.runlogs import LINE_OVERHEAD

JOB_LOG = logging.getLogger("tests.run_logs.job")
LIB_LOG = logging.getLogger("tests.run_logs.lib")


@pytest.fixture(autouse=True)
def _info_level() -> Iterator[None]:
    """The records are made only when their logger's level lets them through (as in ``errands
    worker``, which configures INFO): the two test loggers say INFO whatever the root's level."""
    levels = JOB_LOG.level, LIB_LOG.level
    JOB_LOG.setLevel(logging.INFO)
    LIB_LOG.setLevel(logging.INFO)
    yield
    JOB_LOG.setLevel(levels[0])
    LIB_LOG.setLevel(levels[1])


def _lines(app: Errands, job_id: int) -> list[tuple[int, list[tuple[str, str, str]]]]:
    return [(a.attempt, [(line.level, line.logger, line.message) for line in a.lines])
            for a in app.store.jobs.run_logs(job_id)]


def _count(app: Errands) -> int:
    def read(cur: Any) -> int:
        cur.execute(app.store.dialect.q("SELECT COUNT(*) FROM {run_logs}"))
        return int(cur.fetchone()[0])

    return app.store.db.run(read)


def test_each_attempt_keeps_what_it_logged_and_the_history_prunes_it(app):
    calls: dict[str, int] = {}

    @app.job(name="flaky", max_attempts=2, backoff=0)
    def flaky(n: int) -> None:
        calls["flaky"] = attempt = calls.get("flaky", 0) + 1
        JOB_LOG.info("working on %d, attempt %d", n, attempt)
        LIB_LOG.warning("the library retried %s", "twice")
        other = threading.Thread(target=JOB_LOG.warning, args=("from a thread the job started",))
        other.start()
        other.join()
        try:
            raise KeyError("lookup")
        except KeyError:
            JOB_LOG.exception("caught it")
        raise ValueError(f"attempt {attempt} failed")

    @app.job(name="second_time", max_attempts=2, backoff=0)
    def second_time() -> None:
        calls["second"] = attempt = calls.get("second", 0) + 1
        JOB_LOG.info("second_time attempt %d", attempt)
        if attempt == 1:
            raise OSError("network")

    @app.job(name="kept", keep_result=True)
    def kept() -> int:
        JOB_LOG.info("computing")
        return 42

    dead, retried, finished = flaky.enqueue(7), second_time.enqueue(), kept.enqueue()
    drain(app)
    assert dead.status() is JobState.FAILED and retried.status() is JobState.FINISHED
    attempts = app.store.jobs.run_logs(dead.id)
    assert [a.attempt for a in attempts] == [1, 2]
    for number, attempt in enumerate(attempts, 1):
        kept_lines = [(line.level, line.logger, line.message) for line in attempt.lines]
        assert kept_lines[:3] == [("INFO", JOB_LOG.name, f"working on 7, attempt {number}"),
                                  ("WARNING", LIB_LOG.name, "the library retried twice"),
                                  ("ERROR", JOB_LOG.name, "caught it")]
        assert "KeyError: 'lookup'" in (attempt.lines[2].traceback or "")
        assert len(kept_lines) == 3 and attempt.dropped == 0 and attempt.worker
        # Not the thread the job started, nor the worker's own lines about the run.
        assert not any(line.logger.startswith("errands") or "started" in line.message for line in attempt.lines)
    # A plain success writes no log (its job keeps no record); the failed attempt before it did.
    assert _lines(app, retried.id) == [(1, [("INFO", JOB_LOG.name, "second_time attempt 1")])]
    assert _lines(app, finished.id) == [(1, [("INFO", JOB_LOG.name, "computing")])]

    pruned = app.store.features.prune(None)
    assert pruned["run_logs"] == 1  # the job that succeeded without a record: its history goes
    assert app.store.jobs.run_logs(retried.id) == [] and len(app.store.jobs.run_logs(dead.id)) == 2
    app.store.jobs.forget_failed([dead.id])
    assert app.store.jobs.run_logs(dead.id) == [] and _count(app) == 1  # the kept result's log stays


def test_logs_are_bounded_per_attempt_and_the_off_switches_keep_none(app, migrated_url):
    small = Errands(migrated_url, lease=5, run_log_records=3, run_log_bytes=2 * (1000 + LINE_OVERHEAD + 40))
    off = Errands(migrated_url, lease=5, run_logs=False)
    try:
        @small.job(name="chatty", max_attempts=1)
        def chatty() -> None:
            for n in range(10):
                JOB_LOG.info("line %d", n)
            raise RuntimeError("done talking")

        @small.job(name="wordy", max_attempts=1)
        def wordy() -> None:
            for n in range(3):
                JOB_LOG.info("%d %s", n, "x" * 1000)
            JOB_LOG.info("y" * 100_000)
            raise RuntimeError("done writing")

        @off.job(name="quiet", queue="hush", max_attempts=1)
        def quiet() -> None:
            JOB_LOG.warning("nobody keeps this")
            raise RuntimeError("unheard")

        @small.job(name="secretive", max_attempts=1, run_logs=False)
        def secretive() -> None:
            JOB_LOG.warning("the token is hunter2")
            raise RuntimeError("no logs kept for this one")

        talk, write, hush, secret = chatty.enqueue(), wordy.enqueue(), quiet.enqueue(), secretive.enqueue()
        drain(small)
        [log] = small.store.jobs.run_logs(talk.id)
        assert [line.message for line in log.lines] == ["line 7", "line 8", "line 9"] and log.dropped == 7
        [log] = small.store.jobs.run_logs(write.id)
        assert len(log.lines) == 1 and log.dropped == 3  # the huge one, cut to the byte bound, alone
        assert log.lines[0].message.startswith("y" * 100) and "more characters" in log.lines[0].message
        assert len(log.lines[0].message) < 2 * 1000
        assert secret.status() is JobState.FAILED and small.store.jobs.run_logs(secret.id) == []  # the job's switch
        drain(off, queues=("hush",))
        assert hush.status() is JobState.FAILED and off.store.jobs.run_logs(hush.id) == []
    finally:
        small.store.close()
        off.store.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_async_jobs_keep_their_own_tasks_records(app):
    started: list[str] = []

    @app.job(name="waiter", max_attempts=1)
    async def waiter(tag: str) -> None:
        started.append(tag)
        JOB_LOG.info("%s before", tag)
        for _ in range(1000):  # both runs interleave on the one event loop (a bound, should one start late)
            if len(started) == 2:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(0)
        JOB_LOG.info("%s after", tag)
        raise RuntimeError(tag)

    a, b = waiter.enqueue("a"), waiter.enqueue("b")
    drain(app, concurrency=2)
    assert _lines(app, a.id) == [(1, [("INFO", JOB_LOG.name, "a before"), ("INFO", JOB_LOG.name, "a after")])]
    assert _lines(app, b.id) == [(1, [("INFO", JOB_LOG.name, "b before"), ("INFO", JOB_LOG.name, "b after")])]
