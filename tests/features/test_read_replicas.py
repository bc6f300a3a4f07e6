"""Read replicas' routing, on two databases of the shared servers standing in for a primary and its replica.

Rows enqueued only in the "replica" database prove that a read went there; rows only in the primary
prove that a claim, an action or the job page did not.  The stand-in replicates nothing (it is not in
recovery), so its lag reads 0: the lag, the fallback and a real standby are tests/e2e/test_read_replica.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from helpers import invoke_cli
from starlette.testclient import TestClient

from errands import Errands
from errands.core.errors import ConfigurationError, SchemaError, StoreError
from errands.core.rows import NewJob
from errands.core.settings import AppSettings
from errands.dashboard import AuthSettings, create_dashboard
from errands.diagnostics.checks import diagnose
from errands.services import operator as ops
from errands.services.passwords import hash_password
from errands.services.report import status_report
from errands.store import replicas
from errands.store.dialects.base import ReplicaState
from errands.store.dialects.postgres import driver_url

PAYLOAD = '{"args":[],"kwargs":{}}'
ADMIN, PASSWORD = "ada", "correct horse battery"


@pytest.fixture(params=["postgres", "mariadb"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def replica_url(backend: str, _servers: dict[str, Any]) -> Iterator[str]:
    """A second migrated database on the same server: the stand-in replica."""
    if backend == "postgres":
        pg = _servers["postgres"]
        url, schema = pg.new_url()
        Errands(url).migrate()
        yield url
        pg.drop(schema)
        return
    my = _servers["mysql"]
    url, name = my.new_url()
    my.migrate_by_copy(url)
    yield url
    my.drop(name)


@pytest.fixture
def routed(migrated_url: str, replica_url: str) -> Iterator[tuple[Errands, Errands]]:
    """The app (primary, with ``read_url``) and a writer of the stand-in replica's rows."""
    app = Errands(migrated_url, read_url=replica_url, lease=5)
    writer = Errands(replica_url)
    yield app, writer
    app.close()
    writer.close()


def _enqueue(app: Errands, queue: str, n: int) -> list[int]:
    return app.store.jobs.enqueue([NewJob("sample", queue, PAYLOAD) for _ in range(n)])


def test_the_figures_and_lists_read_the_replica_and_everything_else_the_primary(routed: Any) -> None:
    app, writer = routed
    [mine] = _enqueue(app, "default", 1)
    _enqueue(writer, "replica_only", 3)
    assert app.read_router.source().state == replicas.UP
    overview = ops.overview(app)
    assert {q.name: q.ready for q in overview.queues}.get("replica_only") == 3
    assert overview.totals["ready"] == 3  # the primary's job is not among them: read from the replica
    assert overview.reads is not None and overview.reads.source == "replica"
    assert ops.backlog(app, ["replica_only"])["replica_only"].jobs == 3
    assert {j.queue for j in ops.list_jobs(app, ops.JobFilter()).jobs} == {"replica_only"}
    report = status_report(app)
    assert set(report["queues"]) == {"replica_only"} and report["reads"]["source"] == "replica"
    # The job page an operator acts on reads the primary, as claims do.
    assert ops.job_detail(app, mine).id == mine
    claimed = app.store.jobs.claim("w1", ["default", "replica_only"], 10, 30)
    assert [c.id for c in claimed] == [mine]
    # Doctor: the stand-in answers but replays nothing, which it says.
    [check] = [c for c in diagnose(app).checks if c.name == "read_replica"]
    assert check.status.value == "warn" and "replays no primary" in check.detail, check
    # Whatever routes the reads, the writes go to the primary.
    assert app.read_router.replica_store() is not app.store
    assert app.reads is app.read_router.replica_store()


def test_the_replica_store_never_writes_nor_migrates(routed: Any) -> None:
    app, _ = routed
    replica = app.read_router.replica_store()
    with pytest.raises(StoreError, match="read replica: errands never writes there"):
        replica.db.run(lambda cur: None, write=True)  # every transaction that writes: refused before it starts
    with pytest.raises(SchemaError, match="migrate the primary"):
        replica.migrate()
    # A statement that writes outside a transaction (one job's INSERT) is refused by the session itself.
    with pytest.raises(StoreError, match="(?i)read.only"):
        replica.jobs.enqueue([NewJob("sample", "default", PAYLOAD)])
    table = replica.dialect.t_jobs
    with pytest.raises(StoreError, match="(?i)read.only"):
        replica.db.run(lambda cur: cur.execute(f"DELETE FROM {table}"))


def test_a_replica_without_errands_tables_counts_as_down_and_reads_fall_back(backend: str, migrated_url: str,
                                                                             _servers: dict[str, Any]) -> None:
    empty = (_servers["postgres"] if backend == "postgres" else _servers["mysql"]).new_url()[0]
    app = Errands(migrated_url, read_url=empty)
    try:
        _enqueue(app, "default", 2)
        source = app.read_router.source()
        assert source.state == replicas.DOWN and "no errands tables" in source.detail
        assert source.describe() == "replica down: reading from the primary"
        assert ops.overview(app).totals["ready"] == 2  # from the primary
        [check] = [c for c in diagnose(app).checks if c.name == "read_replica"]
        assert check.status.value == "warn" and "no errands tables" in check.detail
    finally:
        app.close()


def test_the_read_url_option_from_every_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    replica = "postgresql://reader:pw@replica.example/shop"
    monkeypatch.setenv("ERRANDS_CONFIG", "none")
    env = {"ERRANDS_READ_URL": replica, "ERRANDS_READ_MAX_LAG": "4.5"}
    settings = AppSettings.load(environ=env, pyproject=False)
    assert settings.read_url == replica and settings.read_max_lag == 4.5
    toml = tmp_path / "pyproject.toml"
    toml.write_text(f'[tool.errands]\nread-url = "{replica}"\nread_max_lag = 3\n')
    from_file = AppSettings.load(environ={}, pyproject=toml)
    assert from_file.read_url == replica and from_file.read_max_lag == 3
    # ?read_url= (percent-encoded) wins over the option and never reaches libpq.
    other = quote("postgresql://r@other/shop", safe="")
    primary = f"postgresql://u@primary.example/shop?sslmode=disable&read_url={other}"
    app = Errands(primary, read_url=replica)
    assert app.read_router.replica_url == "postgresql://r@other/shop"
    assert "read_url" not in driver_url(primary) and "sslmode=disable" in driver_url(primary)
    assert Errands("postgresql://u@primary.example/shop").read_router.source().describe() == \
        "reads: primary (no read replica configured)"


def test_read_url_is_refused_where_it_cannot_work() -> None:
    with pytest.raises(ConfigurationError, match="SQLite has no read replicas"):
        Errands("sqlite:///:memory:", read_url="sqlite:///other.db")
    with pytest.raises(ConfigurationError, match="SQLite has no read replicas"):
        Errands("sqlite:///jobs.db?read_url=" + quote("sqlite:///other.db", safe=""))
    with pytest.raises(ConfigurationError, match="same kind of database"):
        Errands("postgresql://u@h/db", read_url="mysql://u@h/db")
    with pytest.raises(ConfigurationError, match="read_max_lag must be more than 0"):
        Errands("postgresql://u@h/db", read_max_lag=0)
    # MySQL knows the option (it is not a host parameter of PyMySQL's).
    app = Errands("mysql://u@h/db?read_url=" + quote("mysql://r@h2/db", safe=""))
    assert app.read_router.replica_url == "mysql://r@h2/db"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_replica_found_down_is_not_tried_again_before_its_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    app = Errands("postgresql://u@127.0.0.1:5432/test", read_url="postgresql://u@127.0.0.1:1/none")
    clock = _Clock()
    router = replicas.ReadRouter(app.store, app.read_url, 10, clock=clock)
    replica = router.replica_store()
    assert replica is not None
    attempts = []
    real = replica.dialect.connect
    monkeypatch.setattr(replica.dialect, "connect", lambda: (attempts.append(clock.now), real())[1])
    for _ in range(50):
        assert router.store() is app.store
    assert len(attempts) == 1 and router.source().state == replicas.DOWN
    clock.now += replicas.DOWN_BACKOFF_FIRST
    router.store()
    assert len(attempts) == 2
    clock.now += replicas.DOWN_BACKOFF_FIRST  # the back-off doubled: not yet
    router.store()
    assert len(attempts) == 2
    clock.now += replicas.DOWN_BACKOFF_FIRST
    router.store()
    assert len(attempts) == 3


def test_lag_beyond_the_bound_or_unknown_sends_the_reads_to_the_primary(routed: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    app, _ = routed
    clock = _Clock()
    router = replicas.ReadRouter(app.store, app.read_url, 10, clock=clock)
    replica = router.replica_store()
    said = [ReplicaState(True, 0.2)]
    monkeypatch.setattr(replica.dialect, "replica_state", lambda cur: said[0])
    assert router.store() is replica and router.source().describe() == "reads: replica, lag 0.2 s"
    said[0] = ReplicaState(True, 45.0)
    assert router.store() is replica  # the last look is fresh: no new look yet
    clock.now += replicas.CHECK_EVERY
    assert router.store() is app.store
    assert router.source().describe() == "replica lags 45 s (bound 10 s): reading from the primary"
    said[0] = ReplicaState(True, None)
    clock.now += replicas.CHECK_EVERY
    assert router.store() is app.store and router.source().state == replicas.UNKNOWN
    said[0] = ReplicaState(True, 1.0)
    clock.now += replicas.CHECK_EVERY
    assert router.store() is replica
    with router.own_writes():
        assert router.store() is app.store and router.source().state == replicas.AFTER_CHANGE


def test_the_dashboard_says_where_it_reads_and_shows_a_change_at_once(routed: Any) -> None:
    app, writer = routed
    app.store.accounts.create_user(ADMIN, hash_password(PASSWORD), "admin")
    _enqueue(writer, "replica_only", 2)
    with TestClient(create_dashboard(app, settings=AuthSettings()), base_url="https://testserver",
                    raise_server_exceptions=False) as web:
        assert web.post("/login", data={"username": ADMIN, "password": PASSWORD}, follow_redirects=False) \
            .status_code == 303
        page = web.get("/")
        assert page.status_code == 200 and 'data-reads="replica"' in page.text
        assert "reads: replica, lag 0.0 s" in page.text and "replica_only" in page.text
        assert web.get("/api/overview").json()["reads"]["source"] == "replica"
        token = web.get("/api/me").json()["csrf"]
        paused = web.post("/queues/default/pause", data={"csrf": token}, follow_redirects=False)
        assert paused.status_code < 400 and "errands_wrote" in paused.headers.get("set-cookie", "")
        after = web.get("/queues")  # right after the change: the primary, which shows it
        assert 'data-reads="after a change"' in after.text
        assert "replica_only" not in after.text
        web.cookies.delete("errands_wrote")
        assert 'data-reads="replica"' in web.get("/queues").text


def test_errands_status_prints_where_it_read_from(routed: Any) -> None:
    app, writer = routed
    _enqueue(writer, "replica_only", 1)
    # No --app: a bare URL, with the replica in ERRANDS_READ_URL (read as ERRANDS_DATABASE_URL is).
    done = invoke_cli(app.database_url, "status", ERRANDS_APP="", ERRANDS_READ_URL=app.read_url)
    assert done.returncode == 0, done.stderr
    assert "reads: replica, lag 0.0 s" in done.stdout and "replica_only" in done.stdout
    report = json.loads(invoke_cli(app.database_url, "status", "--json", ERRANDS_APP="",
                                   ERRANDS_READ_URL=app.read_url).stdout)
    assert report["reads"]["source"] == "replica"
    plain = invoke_cli(app.database_url, "status", ERRANDS_APP="")
    assert "reads:" not in plain.stdout and "replica_only" not in plain.stdout
