"""A database that is not there gives StoreUnavailable with a clear, password-free message."""

import pytest

from errands import Errands, StoreUnavailable

URLS = {
    "postgres": "postgresql://bob:s3cret@127.0.0.1:1/nowhere",
    "mariadb": "mysql://bob:s3cret@127.0.0.1:1/nowhere",
}


@pytest.mark.parametrize("kind", sorted(URLS))
def test_enqueue_to_an_unreachable_server(kind):
    app = Errands(URLS[kind])

    @app.job(name="j")
    def j(): ...

    with pytest.raises(StoreUnavailable) as info:
        j.enqueue()
    message = str(info.value)
    assert "127.0.0.1:1" in message and "s3cret" not in message and "***" in message


def test_sqlite_file_that_cannot_be_opened(tmp_path):
    app = Errands(f"sqlite:///{tmp_path}/missing-dir/errands.db")

    @app.job(name="j")
    def j(): ...

    with pytest.raises(StoreUnavailable, match="missing-dir"):
        j.enqueue()


def test_missing_schema_is_a_clear_error_on_servers(db_url, backend):
    if backend == "sqlite":
        pytest.skip("SQLite migrates itself on first use")
    from errands import SchemaError

    app = Errands(db_url)

    @app.job(name="j")
    def j(): ...

    with pytest.raises(SchemaError, match="errands migrate"):
        j.enqueue()
    app.store.close()


def test_sqlite_migrates_itself(tmp_path):
    app = Errands(f"sqlite:///{tmp_path}/fresh.db")

    @app.job(name="j")
    def j(): ...

    assert j.enqueue().id == 1
    app.store.close()


def test_store_check_fails_where_the_first_statement_would(db_url, backend):
    """``Store.check()``, what commands and embedded workers call at start-up: SQLite creates its
    tables, a server without them raises SchemaError, and once migrated the check passes."""
    from errands import SchemaError

    app = Errands(db_url)
    try:
        if backend == "sqlite":
            app.store.check()
            assert app.store.current_version() == app.store.dialect.schema_version
            return
        with pytest.raises(SchemaError, match="errands migrate"):
            app.store.check()
        assert app.store.current_version() is None  # checked, not migrated
        app.migrate()
        app.store.check()
    finally:
        app.store.close()


@pytest.mark.parametrize("kind", sorted(URLS))
def test_store_check_on_an_unreachable_server(kind):
    with pytest.raises(StoreUnavailable, match="127.0.0.1:1"):
        Errands(URLS[kind]).store.check()


OWN_SESSION = {"postgres": "SELECT pg_backend_pid()", "mariadb": "SELECT CONNECTION_ID()"}
END_SESSION = {"postgres": "SELECT pg_terminate_backend(%s)", "mariadb": "KILL %s"}


def _lost_mid_statement(app: Errands, backend: str, calls: list[int]):
    """A statement whose own session the server ends before it runs (as a node dying mid-query
    does) the first time; on later calls it answers 'fresh'."""

    def fn(cur):
        calls.append(1)
        if len(calls) > 1:
            cur.execute("SELECT 1")
            return "fresh"
        cur.execute(OWN_SESSION[backend])
        session = cur.fetchone()[0]
        admin = app.store.dialect.connect()
        try:
            with admin.cursor() as other:
                other.execute(END_SESSION[backend], (session,))
            admin.commit()
        finally:
            admin.close()
        cur.execute("SELECT 1")
        return "lost"

    return fn


def test_a_read_lost_with_its_connection_is_asked_once_more_on_a_fresh_one(app, backend):
    """A worker starting while the server under a multi-host URL dies mid-query exited 3 (a Galera
    drain): a read is repeated once on a new connection, which a multi-host URL makes on the next
    server.  A write is never repeated (its COMMIT may have landed): it raises StoreUnavailable."""
    if backend == "sqlite":
        pytest.skip("SQLite has no server to lose")
    backend = backend.split("-")[0]  # (mariadb-update: MariaDB's other claim mode)
    db = app.store.db
    calls: list[int] = []
    assert db.run(_lost_mid_statement(app, backend, calls)) == "fresh"
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(StoreUnavailable):
        db.run(_lost_mid_statement(app, backend, calls), write=True)
    assert len(calls) == 1
    assert db.run(lambda cur: (cur.execute("SELECT 1"), "answers")[1]) == "answers"  # (reconnected)
