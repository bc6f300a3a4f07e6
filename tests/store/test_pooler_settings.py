"""``pooler=`` and ``listen_url=`` for PostgreSQL (issue 13): how they are read, and that under
``pooler=transaction`` no statement is ever prepared on the server, on any connection the store
opens (the claim, enqueue, migration and schema-check paths included)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from errands import Errands
from errands.core.config import mask_url
from errands.core.errors import ConfigurationError
from errands.store.dialects.postgres import (
    LISTEN_URL_ENV,
    POOLER_ENV,
    driver_url,
    listen_url_setting,
    pooler_setting,
)

pg_only = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


def _with(url: str, option: str) -> str:
    return url + ("&" if "?" in url else "?") + option


def test_pooler_from_the_url_beats_the_environment() -> None:
    assert pooler_setting("postgresql://h/db?pooler=transaction", {POOLER_ENV: "session"}) == (
        "transaction", "?pooler= in the database URL")
    assert pooler_setting("postgresql://h/db", {POOLER_ENV: "Session"}) == ("session", POOLER_ENV)
    assert pooler_setting("postgresql://h/db", {POOLER_ENV: ""})[0] is None
    assert pooler_setting("postgresql://h/db?pooler=none", {POOLER_ENV: "transaction"})[0] is None
    with pytest.raises(ConfigurationError, match="statement"):
        pooler_setting("postgresql://h/db?pooler=statement", {})


def test_errands_options_never_reach_the_driver_and_passwords_stay_masked() -> None:
    direct = "postgresql://u:secret2@db:5432/app"
    url = ("postgresql://u:secret1@bouncer:6432/app?sslmode=disable&pooler=transaction"
           f"&listen_url={quote(direct, safe='')}")
    assert driver_url(url) == "postgresql://u:secret1@bouncer:6432/app?sslmode=disable"
    assert listen_url_setting(url, {})[0] == direct
    assert listen_url_setting("postgresql://h/db", {LISTEN_URL_ENV: direct}) == (direct, LISTEN_URL_ENV)
    masked = mask_url(url)
    assert "secret" not in masked and "pooler=transaction" in masked


def _prepared_everywhere(app: Errands) -> tuple[list[object], int]:
    """(prepare_threshold of every connection the store holds, statements prepared on them)."""
    thresholds, prepared = [], 0
    for _pid, conn in app.store.db._open:
        thresholds.append(conn.prepare_threshold)
        prepared += conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
    return thresholds, prepared


def _busy(app: Errands) -> None:
    """Every hot path more often than psycopg's threshold (5 uses) before it prepares.  On a thread
    with a connection of its own, as the worker's claim loop has (other threads borrow from the
    shared pool, whose connections come from the same ``connect()``)."""
    app.store.db.dedicate_thread()
    job = app.job(name="pooler_probe")(lambda: None)
    for _ in range(12):
        job.enqueue()
        claimed = app.store.jobs.claim("w1", ["default"], 1, 30.0)
        assert claimed
    app.enqueue_many([job.prepare() for _ in range(3)])


@pg_only
def test_nothing_is_prepared_under_transaction_pooling(db_url: str) -> None:
    app = Errands(_with(db_url, "pooler=transaction"))
    try:
        assert app.store.dialect.pooler == "transaction"
        app.migrate()
        _busy(app)
        thresholds, prepared = _prepared_everywhere(app)
        assert thresholds and all(t is None for t in thresholds)
        assert prepared == 0
        assert app.store.listener() is None  # no LISTEN through a transaction pooler: the worker polls
    finally:
        app.store.close()


@pg_only
def test_without_a_pooler_hot_statements_are_prepared(db_url: str) -> None:
    """The contrast that makes the test above mean something: the same work prepares statements."""
    app = Errands(db_url)
    try:
        app.migrate()
        _busy(app)
        assert _prepared_everywhere(app)[1] > 0
        listener = app.store.listener()
        assert listener is not None
        listener.close()
    finally:
        app.store.close()


@pg_only
def test_listen_url_is_used_under_transaction_pooling(db_url: str) -> None:
    direct = db_url.replace("127.0.0.1", "localhost")
    app = Errands(_with(db_url, f"pooler=transaction&listen_url={quote(direct, safe='')}"))
    try:
        app.migrate()
        listener = app.store.listener()
        assert listener is not None
        job = app.job(name="pooler_probe")(lambda: None)
        job.enqueue()
        assert listener.wait(5.0)
        listener.close()
    finally:
        app.store.close()
