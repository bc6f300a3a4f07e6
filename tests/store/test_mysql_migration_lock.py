"""MySQL serialises migrations with a named lock (DDL commits implicitly, so no transaction can).
Lock names are server-wide: the name must carry the database, or migrating one database waits for
every other database's migration on the same server (each tenant's, each test's)."""

from __future__ import annotations

import threading

import pytest
from helpers import scaled

from errands import Errands

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
