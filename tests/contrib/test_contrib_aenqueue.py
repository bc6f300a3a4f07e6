"""``await job.aenqueue(...)`` keeps the event loop serving while the database makes the insert wait.

Another connection holds a write lock on the jobs table; while the enqueue waits for it, a
ticker coroutine keeps ticking (and, in the FastAPI example, other requests are answered).
The plain ``enqueue`` called on the loop freezes it for the whole wait: no tick at all.
No assertion depends on timing: the lock is released only after the loop has shown it runs.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from contrib_helpers import BASE, SECRET, USERS, load_example
from helpers import scaled

from errands import Errands

THREE = pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)


@dataclass
class Lock:
    release: Callable[[], None]
    waiters: Callable[[], int | None]
    """Sessions waiting for the lock, where the server can tell (None: it cannot)."""


@contextmanager
def jobs_table_locked(db_url: str) -> Iterator[Lock]:
    """Hold a write lock on errands_jobs from a connection of our own until released (or the block ends)."""
    if db_url.startswith("sqlite"):
        conn: Any = sqlite3.connect(db_url.split("sqlite:///", 1)[1].split("?")[0], isolation_level=None,
                                    check_same_thread=False)
        conn.execute("BEGIN IMMEDIATE")  # the single writer's lock: every insert waits (busy_timeout)
        lock = Lock(lambda: conn.execute("COMMIT"), lambda: None)
    elif db_url.startswith("postgres"):
        import psycopg

        conn = psycopg.connect(db_url)
        conn.execute("LOCK TABLE errands_jobs IN EXCLUSIVE MODE")  # reads pass, inserts wait
        # Only waits for this test's table: other tests (and runs) share the server.
        lock = Lock(conn.commit, lambda: conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted "
                                                      "AND relation = 'errands_jobs'::regclass").fetchone()[0])
    else:
        import pymysql

        from errands.store.dialects.mysql import MySQLDialect

        conn = pymysql.connect(**MySQLDialect(db_url)._params)
        cur = conn.cursor()
        cur.execute("LOCK TABLES errands_jobs WRITE")

        def mysql_waiters() -> int:
            cur.execute("SELECT count(*) FROM information_schema.processlist WHERE state LIKE 'Waiting for table%' "
                        "AND db = DATABASE()")
            return int(cur.fetchone()[0])

        def unlock() -> None:
            cur.execute("UNLOCK TABLES")

        lock = Lock(unlock, mysql_waiters)
    released = threading.Event()
    original = lock.release

    def release_once() -> None:
        if not released.is_set():
            released.set()
            original()

    lock.release = release_once
    try:
        yield lock
    finally:
        release_once()
        conn.close()


@dataclass
class Ticker:
    """Counts the event loop's turns: a coroutine that sleeps 5 ms at a time and records the gaps."""

    ticks: int = 0
    gaps: list[float] = field(default_factory=list)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(0.005)
            now = loop.time()
            self.gaps.append(now - last)
            last = now
            self.ticks += 1


async def until(predicate: Callable[[], Any], message: str, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + scaled(timeout)
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        await asyncio.sleep(0.01)


def register(app: Errands) -> Any:
    @app.job(name="note")
    def note(text: str) -> None: ...

    return note


@THREE
def test_aenqueue_leaves_the_loop_free_while_the_insert_waits_for_a_lock(app: Errands, db_url: str) -> None:
    note = register(app)
    note.enqueue("warm-up")  # schema checked, connections opened: the wait below is the lock's alone

    async def scenario() -> tuple[int, float, int]:
        ticker = Ticker()
        ticking = asyncio.create_task(ticker.run())
        with jobs_table_locked(db_url) as lock:
            pending = asyncio.create_task(note.aenqueue("under lock"))
            await until(lambda: lock.waiters() != 0, "the insert to wait for the lock")  # (None on SQLite)
            start = ticker.ticks
            await until(lambda: ticker.ticks - start >= 50, "the loop to tick 50 times")
            assert not pending.done()  # still waiting for the lock: the loop ran meanwhile
            ticked = ticker.ticks - start
            lock.release()
            handle = await asyncio.wait_for(pending, scaled(60))
        ticking.cancel()
        return ticked, max(ticker.gaps), handle.id

    ticked, worst_gap, job_id = asyncio.run(scenario())
    assert ticked >= 50
    assert app.store.jobs.get_job(job_id) is not None  # stored once the lock was gone
    print(f"loop ticked {ticked} times while the enqueue waited; longest gap {worst_gap * 1000:.1f} ms")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_blocking_enqueue_freezes_the_loop_for_the_whole_wait(app: Errands, db_url: str) -> None:
    note = register(app)
    note.enqueue("warm-up")

    async def scenario() -> tuple[int, float]:
        ticker = Ticker()
        ticking = asyncio.create_task(ticker.run())
        await until(lambda: ticker.ticks >= 5, "the ticker to start")
        with jobs_table_locked(db_url) as lock:
            threading.Timer(0.3, lock.release).start()  # (a duration, not an assertion)
            before = ticker.ticks
            note.enqueue("blocks the loop")  # what aenqueue exists to avoid
            frozen = ticker.ticks - before
        await until(lambda: ticker.ticks > before + 1, "the loop to run again")
        ticking.cancel()
        return frozen, max(ticker.gaps)

    frozen, worst_gap = asyncio.run(scenario())
    assert frozen == 0  # not one turn of the loop while the plain enqueue waited
    print(f"plain enqueue froze the loop for {worst_gap * 1000:.0f} ms")


@THREE
def test_the_fastapi_example_answers_other_requests_while_an_enqueue_waits(db_url: str) -> None:
    api = load_example("fastapi_app").create_app(db_url, users=USERS, secret_key=SECRET)
    errands = api.state.errands

    async def scenario() -> tuple[int, int]:
        async with api.router.lifespan_context(api), httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=api), base_url=BASE) as client:
            r = await client.post("/login", data={"username": "ada", "password": USERS["ada"][1]})
            assert r.status_code == 303
            with jobs_table_locked(db_url) as lock:
                pending = asyncio.create_task(client.post("/jobs", json={"job": "count_words", "args": ["a b"]}))
                await until(lambda: lock.waiters() != 0, "the insert to wait for the lock")
                answered = 0
                for _ in range(20):  # other requests are served meanwhile
                    assert (await client.get("/")).status_code == 200
                    answered += 1
                assert not pending.done()
                lock.release()
                r = await asyncio.wait_for(pending, scaled(60))
            assert r.status_code == 202
            job_id = r.json()["id"]
            await until(lambda: errands.store.features.get_result(job_id) is not None, "the worker to run the job")
            return answered, job_id

    try:
        answered, job_id = asyncio.run(scenario())
        assert answered == 20
        found = errands.store.features.get_result(job_id)
        assert found is not None and found.result == 2
    finally:
        errands.store.close()
