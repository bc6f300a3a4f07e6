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
