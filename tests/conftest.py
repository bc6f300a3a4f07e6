"""Real databases for every test: a fresh SQLite file, PostgreSQL schema or MariaDB database each.

PostgreSQL and MySQL/MariaDB come from ERRANDS_TEST_POSTGRES_URL / ERRANDS_TEST_MYSQL_URL
(default: the local servers).  Outside CI an unreachable server skips its tests with a
message naming it; under CI=true it fails the run, because those suites are mandatory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import BACKENDS, DIALECT_OF, scaled

from errands import Errands

sys.path.insert(0, str(Path(__file__).parent / "apps"))

PG_ADMIN_URL = os.environ.get("ERRANDS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_ADMIN_URL = os.environ.get("ERRANDS_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

START_HINTS = {
    "postgres": "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    "mysql": "start it with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
}

CONNECT_TIMEOUT = max(1, round(scaled(5)))  # whole seconds for both drivers; 0 would mean "no limit"


@pytest.hookimpl(trylast=True)  # after pytest-timeout's own pytest_configure has read the limit
def pytest_configure(config: pytest.Config) -> None:
    """pytest-timeout's per-test limit (pyproject.toml, --timeout or PYTEST_TIMEOUT) times
    ERRANDS_TEST_TIME_SCALE, like every other limit of the suite."""
    if getattr(config, "_env_timeout", None):
        config._env_timeout = scaled(config._env_timeout)


# Modules whose module-scoped fixture is costly (private database servers, a wheel build): under
# pytest-xdist (make test) their tests go to one worker, so it is made once, not once per worker.
# A scheduler of our own, because xdist's xdist_group mark no longer groups under pytest 9.
ONE_WORKER_MODULES = {"tests/e2e/test_database_outage.py", "tests/e2e/test_failover.py",
                      "tests/e2e/test_pooler_private.py",
                      "tests/packaging/test_distribution.py", "tests/browser/test_dashboard_layout.py",
                      "tests/e2e/test_read_replica.py", "tests/e2e/test_galera.py", "tests/e2e/test_galera_nodes.py"}


CLAIM_MODE_DIRS = ("tests/store/", "tests/worker/", "tests/features/", "tests/e2e/", "tests/cli/test_commands.py",
                   "tests/robustness/test_held_once.py", "tests/robustness/test_poison_inputs.py",
                   "tests/robustness/test_refused_settle.py")
"""Where MariaDB also runs in the conditional-UPDATE claim mode (``mariadb-update``): that mode changes
only how a worker claims and how stale leases are locked for recovery, which the store's, the worker's,
the features', the end-to-end tests and these few others exercise.  The dashboard, the other CLI and
robustness tests and the observability tests read and change jobs through the same statements in
either mode, so there the second MariaDB run only doubled their time (some 140 tests).  A test that
names its backends itself keeps them."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests (many processes, servers restarted) first, the rest after them in their order:
    in parallel runs the long ones then overlap the short ones instead of trailing alone at the end.
    ``mariadb-update`` runs only where the claim mode matters (:data:`CLAIM_MODE_DIRS`)."""
    def slow(item: pytest.Item) -> bool:
        return item.get_closest_marker("slow") is not None or item.nodeid.split("::", 1)[0] in ONE_WORKER_MODULES

    def same_in_both_modes(item: pytest.Item) -> bool:
        asked = any(m.args and m.args[0] == "backend" for m in item.iter_markers("parametrize"))
        return "mariadb-update" in item.nodeid and not asked and not item.nodeid.startswith(CLAIM_MODE_DIRS)

    deselected = [i for i in items if same_in_both_modes(i)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [i for i in items if not same_in_both_modes(i)]
    items[:] = [i for i in items if slow(i)] + [i for i in items if not slow(i)]


_SPENT: dict[str, float] = {}
"""Seconds each test took (setup, call and teardown), gathered where the reports arrive."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _SPENT[report.nodeid] = _SPENT.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write test-artifacts/durations-pyX.Y.txt: the slowest tests and each module's total, so the next
    person splitting the suite's slow groups starts from this run's figures, not guesses."""
    if hasattr(session.config, "workerinput") or not _SPENT:  # an xdist worker: the controller writes
        return
    modules: dict[str, float] = {}
    for nodeid, spent in _SPENT.items():
        module = nodeid.split("::", 1)[0]
        modules[module] = modules.get(module, 0.0) + spent
    lines = [f"{len(_SPENT)} tests, {sum(_SPENT.values()):.0f} s in all (summed over parallel workers)", "",
             "modules:"]
    lines += [f"{spent:8.1f} s  {module}" for module, spent in sorted(modules.items(), key=lambda m: -m[1])[:40]]
    lines += ["", "tests:"]
    lines += [f"{spent:8.1f} s  {nodeid}" for nodeid, spent in sorted(_SPENT.items(), key=lambda t: -t[1])[:80]]
    out = Path(__file__).resolve().parent.parent / "test-artifacts"
    out.mkdir(exist_ok=True)
    # One file per interpreter: `make test` runs the Django 6 suite on another Python after the main one.
    (out / f"durations-py{sys.version_info[0]}.{sys.version_info[1]}.txt").write_text("\n".join(lines) + "\n")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        """Test by test as --dist load, but the tests of ONE_WORKER_MODULES as one unit each."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    return Scheduling(config, log)


def _unreachable(server: str, url: str, exc: BaseException) -> None:
    message = f"{server} at {url} is unreachable ({exc}); {START_HINTS[server]}"
    if IN_CI:
        pytest.fail(f"CI=true makes the {server} suite mandatory: {message}", pytrace=False)
    pytest.skip(message)


class _Postgres:
    """One scratch database per test session; one schema per test inside it."""

    def __init__(self) -> None:
        self.database: str | None = None
        self.error: BaseException | None = None

    def admin(self, database: str | None = None):  # type: ignore[no-untyped-def]
        import psycopg

        url = PG_ADMIN_URL if database is None else PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + database
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)

    def new_url(self) -> tuple[str, str]:
        if self.error is not None:
            _unreachable("postgres", PG_ADMIN_URL, self.error)
        try:
            if self.database is None:
                name = f"errands_test_{secrets.token_hex(4)}"
                with self.admin() as conn:
                    conn.execute(f"CREATE DATABASE {name}")
                self.database = name
        except Exception as exc:
            self.error = exc
            _unreachable("postgres", PG_ADMIN_URL, exc)
        schema = f"t_{secrets.token_hex(5)}"
        with self.admin(self.database) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        base = PG_ADMIN_URL.rsplit("/", 1)[0]
        return f"{base}/{self.database}?options={quote('-csearch_path=' + schema)}", schema

    def drop(self, schema: str) -> None:
        with self.admin(self.database) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    def close(self) -> None:
        if self.database:
            with self.admin() as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")


class _MySQL:
    """One scratch database per test (cheap on MariaDB)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.template: str | None = None
        self.routines: list[str] | None = None

    def admin(self):  # type: ignore[no-untyped-def]
        import pymysql

        from errands.store.dialects.mysql import MySQLDialect

        params = dict(MySQLDialect(MYSQL_ADMIN_URL)._params)
        params["connect_timeout"] = CONNECT_TIMEOUT
        return pymysql.connect(**params)

    def new_url(self) -> tuple[str, str]:
        if self.error is not None:
            _unreachable("mysql", MYSQL_ADMIN_URL, self.error)
        name = f"errands_t_{secrets.token_hex(5)}"
        try:
            conn = self.admin()
        except Exception as exc:
            self.error = exc
            _unreachable("mysql", MYSQL_ADMIN_URL, exc)
        with conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        return MYSQL_ADMIN_URL.split("?")[0].rsplit("/", 1)[0] + "/" + name, name

    def drop(self, name: str) -> None:
        with self.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")

    def migrate_by_copy(self, url: str) -> None:
        """Give the empty database of ``url`` errands' tables, version rows and stored procedures by copying
        them from a template this process migrated once: ``errands migrate`` on MariaDB runs some forty DDL
        statements (2-6 s per test here), ``CREATE TABLE ... LIKE`` one per table.  Tests of the
        migration itself migrate an empty ``db_url`` and never come here."""
        name = url.split("?")[0].rsplit("/", 1)[1]
        with self.admin() as conn, conn.cursor() as cur:
            if self.template is None:
                template = f"errands_tpl_{secrets.token_hex(5)}"
                cur.execute(f"CREATE DATABASE {template}")
                migrator = Errands(url.split("?")[0].rsplit("/", 1)[0] + "/" + template)
                try:
                    migrator.migrate()
                finally:
                    migrator.store.close()
                self.template = template
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (self.template,))
            for (table,) in cur.fetchall():
                cur.execute(f"CREATE TABLE {name}.{table} LIKE {self.template}.{table}")
                cur.execute(f"INSERT INTO {name}.{table} SELECT * FROM {self.template}.{table}")
            conn.commit()
            if self.routines is None:  # the stored procedures migrate made (the SQL enqueue), read once
                cur.execute("SELECT routine_name FROM information_schema.routines WHERE routine_schema = %s "
                            "AND routine_type = 'PROCEDURE'", (self.template,))
                self.routines = []
                for (routine,) in cur.fetchall():
                    cur.execute(f"SHOW CREATE PROCEDURE {self.template}.{routine}")
                    self.routines.append(cur.fetchone()[2])
            if self.routines:
                cur.execute(f"USE {name}")
                for ddl in self.routines:
                    cur.execute(ddl)

    def close(self) -> None:
        if self.template is not None:
            with contextlib.suppress(Exception):
                self.drop(self.template)


@pytest.fixture(scope="session")
def _servers() -> Iterator[dict[str, object]]:
    pg, my = _Postgres(), _MySQL()
    yield {"postgres": pg, "mysql": my}
    pg.close()
    my.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, _servers: dict[str, object], tmp_path: Path) -> Iterator[str]:
    """A URL to an empty database of the requested backend, dropped after the test."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'errands.db'}"
        return
    if backend == "postgres":
        pg: _Postgres = _servers["postgres"]  # type: ignore[assignment]
        url, schema = pg.new_url()
        try:
            yield url
        finally:
            pg.drop(schema)
        return
    my: _MySQL = _servers["mysql"]  # type: ignore[assignment]
    url, name = my.new_url()
    try:
        yield url + ("?claim=update" if backend == "mariadb-update" else "")
    finally:
        my.drop(name)


@pytest.fixture
def migrated_url(backend: str, db_url: str, _servers: dict[str, object]) -> str:
    """``db_url`` with errands' tables in place (on MariaDB copied from a template: see migrate_by_copy)."""
    if DIALECT_OF[backend] == "mysql":
        my: _MySQL = _servers["mysql"]  # type: ignore[assignment]
        my.migrate_by_copy(db_url)
    else:
        migrator = Errands(db_url)
        try:
            migrator.migrate()
        finally:
            migrator.store.close()
    return db_url


@pytest.fixture
def app(migrated_url: str) -> Iterator[Errands]:
    app = Errands(migrated_url, lease=5)
    app.migrate()  # finds the tables at the current version: a no-op, as on a deployed database
    yield app
    app.store.close()
