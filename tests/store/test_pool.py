"""The shared connection pool (issue 13): its bound holds, and a borrowed connection comes back
after an exception, on every backend."""

from __future__ import annotations

import threading

import pytest

from errands import Errands
from errands.core.errors import ConfigurationError, StoreUnavailable
from errands.store.dialects.postgres import driver_url
from errands.store.pool import BoundedPool, pool_setting


class _Conn:
    def __init__(self, opened: list[_Conn]) -> None:
        self.closed = False
        opened.append(self)

    def close(self) -> None:
        self.closed = True


def test_bounded_pool_never_opens_more_than_its_size_and_times_out() -> None:
    opened: list[_Conn] = []
    pool = BoundedPool(lambda: _Conn(opened), size=2, timeout=0.05)
    a, b = pool.get(), pool.get()
    with pytest.raises(Exception, match="stayed busy"):
        pool.get()
    pool.put(a)
    assert pool.get() is a  # reused, not a third connection
    pool.discard(b)  # broken: closed, and its place opens a new one
    assert b.closed
    pool.get()
    assert len(opened) == 3
    pool.close()


def test_a_waiting_thread_gets_the_connection_given_back_or_the_place_freed() -> None:
    opened: list[_Conn] = []
    pool = BoundedPool(lambda: _Conn(opened), size=1, timeout=30)
    a = pool.get()
    got: list[_Conn] = []
    waiter = threading.Thread(target=lambda: got.append(pool.get()))
    waiter.start()
    while not pool._waiting:  # the waiter has counted itself and waits
        threading.Event().wait(0.001)
    pool.put(a)
    waiter.join(10)
    assert got == [a] and len(opened) == 1
    # A discarded connection frees its place for a waiter, which opens a new one.
    waiter = threading.Thread(target=lambda: got.append(pool.get()))
    waiter.start()
    while not pool._waiting:
        threading.Event().wait(0.001)
    pool.discard(a)
    waiter.join(10)
    assert len(got) == 2 and got[1] is not a and len(opened) == 2
    pool.close()


def test_a_failed_connect_frees_its_place() -> None:
    calls = [0]

    def connect() -> _Conn:
        calls[0] += 1
        if calls[0] == 1:
            raise OSError("refused")
        return _Conn([])

    pool = BoundedPool(connect, size=1, timeout=0.05)
    with pytest.raises(OSError):
        pool.get()
    assert pool.get() is not None  # the one place was given back


def test_pool_settings_come_from_the_url_then_the_environment() -> None:
    assert pool_setting("sqlite:///x.db", {}) == (4, 30.0)
    assert pool_setting("sqlite:///x.db?pool_size=2&pool_timeout=0.5", {"ERRANDS_POOL_SIZE": "9"}) == (2, 0.5)
    assert pool_setting("sqlite:///x.db", {"ERRANDS_POOL_SIZE": "9"}) == (9, 30.0)
    for bad in ("0", "1.5", "many"):
        with pytest.raises(ConfigurationError):
            pool_setting(f"sqlite:///x.db?pool_size={bad}", {})
    # libpq refuses options it does not know: the pool options leave the URL with errands' other ones.
    assert driver_url("postgresql://h/db?pool_size=2&options=x") == "postgresql://h/db?options=x"


def test_threads_share_the_bounded_pool_and_get_connections_back_after_errors(db_url: str) -> None:
    sep = "&" if "?" in db_url else "?"
    app = Errands(db_url + sep + "pool_size=2&pool_timeout=0.2")
    app.migrate()
    db = app.store.db
    try:
        with pytest.raises(ZeroDivisionError):
            db.run(lambda cur: 1 / 0, write=True)
        assert db.run(lambda cur: db.connection()) is db.run(lambda cur: db.connection())  # given back, reused

        inside, release = threading.Barrier(3), threading.Event()
        errors: list[BaseException] = []

        def hold() -> None:
            try:
                db.run(lambda cur: (inside.wait(5), release.wait(5)))
            except BaseException as exc:  # noqa: B036 - reported by the test
                errors.append(exc)

        threads = [threading.Thread(target=hold) for _ in range(2)]
        for t in threads:
            t.start()
        inside.wait(5)  # both pooled connections are lent out now
        with pytest.raises(StoreUnavailable, match="pool_size"):
            db.run(lambda cur: None)
        release.set()
        for t in threads:
            t.join(5)
        assert not errors
        assert db.run(lambda cur: 42) == 42  # both came back
    finally:
        app.store.close()
