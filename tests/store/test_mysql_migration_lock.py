"""MySQL serialises migrations with a named lock (DDL commits implicitly, so no transaction can).
Lock names are server-wide: the name must carry the database, or migrating one database waits for
every other database's migration on the same server (each tenant's, each test's)."""

from __future__ import annotations

import logging
import socket
import threading

import pytest
from helpers import scaled, wait_for

from errands import Errands, StoreUnavailable
from errands.store.dialects import mysql_lock
from errands.store.dialects.mysql_lock import LeaseTimes
from errands.store.driver import fetch_row, scalar

pytestmark = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


def test_a_migration_elsewhere_on_the_server_does_not_hold_this_one(db_url, _servers):
    other_url, other = _servers["mysql"].new_url()
    try:
        holder = Errands(other_url)
        conn = holder.store.dialect.connect()
        try:
            with holder.store.dialect.migration_lock(conn):  # another database's migration, in progress
                done = threading.Event()
                app = Errands(db_url)

                def migrate() -> None:
                    app.migrate()
                    done.set()

                threading.Thread(target=migrate, daemon=True).start()
                # The lock waits up to 60 s before going on regardless: finishing well within that
                # means this migration never queued behind the other database's.
                assert done.wait(scaled(30)), "the migration waited for another database's lock"
                app.store.close()
        finally:
            conn.close()
            holder.store.close()
    finally:
        _servers["mysql"].drop(other)


# ---------------------------------------------------------------------- the lock row (Galera)
# On a Galera node (@@wsrep_on ON) migrations serialise on a row of errands_migration_lock, as GET_LOCK
# holds on one node only.  The shared MariaDB has wsrep off, so these tests ask for the row themselves
# (``migration_lock_kind = "row"``); the private cluster's tests take it on real nodes.

LOCK_TABLE = "errands_migration_lock"


def _row_locking(url: str, **times: float) -> Errands:
    app = Errands(url)
    dialect = app.store.dialect
    dialect.migration_lock_kind = "row"  # type: ignore[attr-defined]
    dialect.migration_lease = LeaseTimes(**{"lease": 60.0, "renew_every": 0.1, "wait": scaled(60),  # type: ignore[attr-defined]
                                            "poll": 0.05, **times})
    return app


def _lock_row(app: Errands) -> dict | None:
    def read(cur):  # type: ignore[no-untyped-def]
        cur.execute(f"SELECT holder, expires_at FROM {LOCK_TABLE} WHERE id = 1")
        return fetch_row(cur)
    return app.store.db.run_unchecked(read)


def test_a_migrator_waits_while_another_holds_the_lock_row_which_it_renews(db_url, caplog):
    caplog.set_level(logging.INFO, logger="errands.store")
    holder, waiter = _row_locking(db_url), _row_locking(db_url)
    conn = holder.store.dialect.connect()
    held = holder.store.dialect.migration_lock(conn)
    held.__enter__()
    try:
        first = _lock_row(holder)
        assert first is not None and first["holder"].startswith(socket.gethostname()[:80])
        wait_for(lambda: _lock_row(holder)["expires_at"] > first["expires_at"], message="the lease renewed")
        done = threading.Event()

        def migrate() -> None:
            waiter.migrate()
            done.set()

        threading.Thread(target=migrate, daemon=True).start()
        wait_for(lambda: "waiting for the migration lock held by " + first["holder"] in caplog.text,
                 message="the second migrator waiting for the lock row")
        assert not done.is_set() and waiter.store.db.current_version() is None
    finally:
        held.__exit__(None, None, None)
        conn.close()
    assert done.wait(scaled(60)), "the waiting migration did not go on once the lock was released"
    assert waiter.store.db.current_version() == waiter.store.dialect.schema_version
    assert _lock_row(holder)["holder"] is None  # released by the second migrator too
    holder.close()
    waiter.close()


def test_a_held_lock_row_is_refused_after_the_wait_and_a_crashed_holders_lease_runs_out(db_url):
    app = _row_locking(db_url, wait=0.3)

    def crashed_holder(cur, seconds_left: int) -> None:  # type: ignore[no-untyped-def]
        cur.execute(mysql_lock.DDL.format(table=LOCK_TABLE))
        cur.execute(f"REPLACE INTO {LOCK_TABLE} (id, holder, expires_at) "
                    f"VALUES (1, 'gone:4242:dead', UTC_TIMESTAMP(6) + INTERVAL {seconds_left} SECOND)")

    app.store.db.run_unchecked(lambda cur: crashed_holder(cur, 3600))
    with pytest.raises(StoreUnavailable, match="another migration holds the migration lock .*'gone:4242:dead'.*"
                                               "waited 0.3 s"):
        app.migrate()
    assert app.store.db.current_version() is None
    app.store.db.run_unchecked(lambda cur: crashed_holder(cur, -1))  # its lease has run out
    app.migrate()
    assert app.store.db.current_version() == app.store.dialect.schema_version
    assert _lock_row(app)["holder"] is None
    app.close()


def test_without_wsrep_the_lock_stays_get_lock_and_no_lock_table_is_made(db_url):
    app = Errands(db_url)
    assert app.store.dialect.migration_lock_kind == "auto"  # type: ignore[attr-defined]
    app.migrate()

    def tables(cur):  # type: ignore[no-untyped-def]
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_NAME = %s", (LOCK_TABLE,))
        return scalar(cur)

    assert app.store.db.run_unchecked(tables) == 0
    app.close()
