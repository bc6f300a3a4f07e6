"""Enqueue from SQL (issue 27, point 5): the ``errands_enqueue`` entry point that ``errands migrate``
creates (a PostgreSQL function, a MySQL/MariaDB stored procedure, a SQLite view with an INSTEAD OF
INSERT trigger), used from each database's own command-line client, from a trigger on a user's
table, and from a driver; the jobs it stores are run by a worker as Python's are.

One run per database (the claim mode of MariaDB plays no part here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from helpers import scaled, wait_for

from errands import Errands
from errands.core import wire
from errands.core.rows import JobState
from errands.diagnostics import diagnose
from errands.diagnostics.model import Status
from errands.store.driver import Connection, fetch_rows


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sql_app(migrated_url: str) -> Iterator[tuple[Errands, list[Any]]]:
    """An app whose ``add`` job records its arguments, that buries unknown names at once."""
    app = Errands(migrated_url, unknown_job_grace=0)
    ran: list[Any] = []

    @app.job(name="add")
    def add(a: int, b: int, c: int = 0) -> None:
        ran.append(a + b + c)

    @app.job(name="echo")
    def echo(*args: Any, **kwargs: Any) -> None:
        ran.append((list(args), kwargs))

    yield app, ran
    app.store.close()


# ---------------------------------------------------------------------------------- clients
def client_command(url: str) -> tuple[list[str], dict[str, str]]:
    """The database's own command-line client on the test database of ``url``, and its environment."""
    parts = urlsplit(url)
    if url.startswith("sqlite"):
        return ["sqlite3", "-bail", parts.path], dict(os.environ)
    if url.startswith("postgres"):
        options = parse_qs(parts.query).get("options", [""])[0]
        env = {**os.environ, "PGOPTIONS": unquote(options), "PGCONNECT_TIMEOUT": "5"}
        return ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", parts.hostname or "127.0.0.1",
                "-p", str(parts.port or 5432), "-U", parts.username or "postgres", parts.path.lstrip("/")], env
    return ["mysql", "-N", "-B", "-h", parts.hostname or "127.0.0.1", "-P", str(parts.port or 3306),
            "-u", parts.username or "root", parts.path.lstrip("/")], dict(os.environ)


def run_client(url: str, script: str) -> subprocess.CompletedProcess[str]:
    command, env = client_command(url)
    if shutil.which(command[0]) is None:  # mandatory under CI=true, as the database servers are
        missing = (pytest.fail if os.environ.get("CI", "").lower() in ("1", "true", "yes") else pytest.skip)
        missing(f"the {command[0]} client is not installed (apt-get install sqlite3 postgresql-client mariadb-client)")
    return subprocess.run(command, input=script, env=env, capture_output=True, text=True, timeout=scaled(60))


def call_sql(dialect: str, name: str, args: str | None = "[]", **options: Any) -> tuple[str, list[Any]]:
    """The statement that enqueues through the entry point on ``dialect`` (driver placeholders), and its
    parameters; on MySQL a second statement reads the OUT id."""
    values = {p.name: options.get(p.name) for p in wire.PARAMETERS}
    values.update(name=name, args=args)
    if dialect == "postgresql":  # named notation: only what is given
        given = {k: v for k, v in values.items() if v is not None or k in ("name", "args")}
        return ("SELECT errands_enqueue(" + ", ".join(f"{k} => %s" for k in given) + ")", list(given.values()))
    if dialect == "mysql":
        return "CALL errands_enqueue(" + ", ".join(["%s"] * len(values)) + ", @id)", list(values.values())
    return ("INSERT INTO errands_enqueue (" + ", ".join(values) + ") VALUES (" + ", ".join("?" * len(values)) + ")",
            list(values.values()))


def enqueue_sql(app: Errands, conn: Connection, name: str, args: str | None = "[]", **options: Any) -> int | None:
    """Enqueue through the entry point on a connection of the app's database; the id it returned (SQLite:
    the id the key points at, or the highest id: a view returns none)."""
    dialect = app.store.dialect.name
    sql, params = call_sql(dialect, name, args, **options)
    cur = conn.cursor()
    cur.execute(sql, params)
    if dialect == "postgresql":
        return cur.fetchone()[0]  # type: ignore[index]
    if dialect == "mysql":
        cur.execute("SELECT @id")
        return cur.fetchone()[0]  # type: ignore[index]
    if options.get("unique_key"):
        cur.execute("SELECT job_id FROM errands_unique_keys WHERE name = ?", (options["unique_key"],))
    else:
        cur.execute("SELECT MAX(id) FROM errands_jobs")
    return cur.fetchone()[0]  # type: ignore[index]


def rows(app: Errands, conn: Connection, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    cur = conn.cursor()
    cur.execute(sql.replace("?", app.store.dialect.placeholder), params)
    return fetch_rows(cur)


@pytest.fixture
def conn(sql_app: tuple[Errands, list[Any]]) -> Iterator[Connection]:
    """An autocommit connection of the test's database, as an outside program would hold one."""
    connection = sql_app[0].store.dialect.connect()
    yield connection
    connection.close()


# ---------------------------------------------------------------------------------- tests
def test_the_printed_schema_runs_in_the_database_client_which_then_enqueues_for_a_worker(backend, db_url, request):
    """``errands migrate --sql`` as the database's own client reads it, then the client enqueues a job
    with arguments, a duplicate of a unique key and a name no app registers; a worker runs the first
    with its arguments and buries the unknown one.  On MariaDB the client runs the printed procedure
    (between DELIMITER lines) on a copy of a migrated database without it: the forty CREATE TABLEs
    before it took the client 2 s, and are plain statements."""
    app = Errands(db_url, unknown_job_grace=0)
    script = app.store.migration_sql()
    dialect = app.store.dialect.name
    if dialect == "mysql":
        request.getfixturevalue("migrated_url")
        app.store.db.run(lambda cur: cur.execute("DROP PROCEDURE errands_enqueue"), write=True)
        start = script.index("DROP PROCEDURE IF EXISTS errands_enqueue;")
        script = script[start:script.index("DELIMITER ;", start) + len("DELIMITER ;\n")]
        assert script.count("DELIMITER") == 2, script
    if dialect == "postgresql":
        calls = ["SELECT errands_enqueue('add', '[1, 2]', '{\"c\": 3}');",
                 "SELECT errands_enqueue('add', '[10, 20]', unique_key => 'once');",
                 "SELECT errands_enqueue('add', '[10, 20]', unique_key => 'once');",
                 "SELECT errands_enqueue('nobody.knows', '[]');"]
    elif dialect == "mysql":
        calls = [f"CALL errands_enqueue({call}, @id); SELECT @id;" for call in (
            "'add', '[1, 2]', '{\"c\": 3}', NULL, NULL, NULL, NULL, NULL, NULL",
            "'add', '[10, 20]', NULL, NULL, NULL, NULL, 'once', NULL, NULL",
            "'add', '[10, 20]', NULL, NULL, NULL, NULL, 'once', NULL, NULL",
            "'nobody.knows', '[]', NULL, NULL, NULL, NULL, NULL, NULL, NULL")]
    else:
        calls = ["INSERT INTO errands_enqueue (name, args, kwargs) VALUES ('add', '[1, 2]', '{\"c\": 3}');",
                 "INSERT INTO errands_enqueue (name, args, unique_key) VALUES ('add', '[10, 20]', 'once');",
                 "INSERT INTO errands_enqueue (name, args, unique_key) VALUES ('add', '[10, 20]', 'once');",
                 "INSERT INTO errands_enqueue (name) VALUES ('nobody.knows');",
                 "SELECT id FROM errands_jobs ORDER BY id;", "SELECT job_id FROM errands_unique_keys;"]
    done = run_client(db_url, script + "\n".join(calls) + "\n")
    assert done.returncode == 0, done.stderr
    # The duplicate returned the holder's id (a view returns nothing: SQLite lists the rows and the key).
    assert done.stdout.split() == (["1", "2", "3", "2"] if dialect == "sqlite" else ["1", "2", "2", "3"])
    try:
        assert app.migrate() == []  # the client recorded every version
        ran: list[int] = []

        @app.job(name="add")
        def add(a: int, b: int, c: int = 0) -> None:
            ran.append(a + b + c)

        app.run_until_empty()
        assert sorted(ran) == [6, 30]
        [dead] = app.failed()
        assert (dead.id, dead.name, dead.error_type) == (3, "nobody.knows", "errands.UnknownJob")
    finally:
        app.store.close()


def test_a_trigger_on_a_users_table_enqueues_in_the_same_transaction(backend, sql_app, conn):
    """An AFTER INSERT trigger of the user's ``orders`` table enqueues a job per row (a unique key per
    customer), which wakes an idle worker; a row the entry point refuses rolls the user's own insert back."""
    app, ran = sql_app
    dialect = app.store.dialect.name
    cur = conn.cursor()
    if dialect == "postgresql":
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, customer TEXT, total INT)")
        cur.execute("CREATE FUNCTION orders_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                    " PERFORM errands_enqueue('echo', jsonb_build_array(NEW.id, NEW.total), queue => 'orders',"
                    " unique_key => 'customer:' || NEW.customer); RETURN NEW; END $$")
        cur.execute("CREATE TRIGGER orders_enqueue AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION"
                    " orders_enqueue()")
    elif dialect == "mysql":
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, customer VARCHAR(50), total INT) ENGINE=InnoDB")
        cur.execute("CREATE TRIGGER orders_enqueue AFTER INSERT ON orders FOR EACH ROW"
                    " CALL errands_enqueue('echo', JSON_ARRAY(NEW.id, NEW.total), NULL, 'orders', NULL, NULL,"
                    " CONCAT('customer:', NEW.customer), NULL, NULL, @errands_id)")
    else:
        cur.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total INTEGER)")
        cur.execute("CREATE TRIGGER orders_enqueue AFTER INSERT ON orders BEGIN"
                    " INSERT INTO errands_enqueue (name, args, queue, unique_key)"
                    " VALUES ('echo', json_array(NEW.id, NEW.total), 'orders', 'customer:' || NEW.customer); END")
    mark = app.store.dialect.placeholder
    insert = f"INSERT INTO orders (id, customer, total) VALUES ({mark}, {mark}, {mark})"
    listener = app.store.listener()  # an idle worker's: PostgreSQL's LISTEN, the others' polled highest id
    assert listener is not None
    try:
        while listener.wait(0):  # whatever the set-up left to notice
            pass
        cur.execute(insert, (1, "ada", 30))
        assert wait_for(lambda: listener.wait(0.2), timeout=scaled(10), message="the idle worker to be woken")
    finally:
        listener.close()
    cur.execute(insert, (2, "bob", 12))
    cur.execute(insert, (3, "ada", 99))  # ada's job still waits: its key keeps a second one out
    with pytest.raises(Exception, match="errands_enqueue: name must be a non-empty text"):
        _refused_by_trigger(app, conn)
    assert rows(app, conn, "SELECT COUNT(*) AS n FROM bad_orders")[0]["n"] == 0  # the user's insert undone
    assert [r["id"] for r in rows(app, conn, "SELECT id FROM orders ORDER BY id")] == [1, 2, 3]
    app.run_until_empty(["orders"])
    assert sorted(ran) == [([1, 30], {}), ([2, 12], {})]


def _refused_by_trigger(app: Errands, conn: Connection) -> None:
    """An insert into the user's table whose trigger passes the entry point an empty name."""
    cur = conn.cursor()
    dialect = app.store.dialect.name
    if dialect == "postgresql":
        cur.execute("CREATE TABLE bad_orders (id INT)")
        cur.execute("CREATE FUNCTION bad_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                    " PERFORM errands_enqueue('', '[]'); RETURN NEW; END $$")
        cur.execute("CREATE TRIGGER bad_enqueue AFTER INSERT ON bad_orders FOR EACH ROW EXECUTE FUNCTION bad_enqueue()")
    elif dialect == "mysql":
        cur.execute("CREATE TABLE bad_orders (id INT) ENGINE=InnoDB")
        cur.execute("CREATE TRIGGER bad_enqueue AFTER INSERT ON bad_orders FOR EACH ROW"
                    " CALL errands_enqueue('', '[]', NULL, NULL, NULL, NULL, NULL, NULL, NULL, @errands_id)")
    else:
        cur.execute("CREATE TABLE bad_orders (id INTEGER)")
        cur.execute("CREATE TRIGGER bad_enqueue AFTER INSERT ON bad_orders BEGIN"
                    " INSERT INTO errands_enqueue (name) VALUES (''); END")
    cur.execute("INSERT INTO bad_orders (id) VALUES (1)")


def test_unique_key_queue_priority_delay_and_timeout_as_the_python_enqueue_stores_them(backend, sql_app, conn):
    """A duplicate key stores no second job and returns the holder's id, whether the holder was
    enqueued from SQL or from Python (and the other way round); a key whose job ended is taken over;
    queue, priority, delay (by the database's clock), max_attempts and timeout land in the row; and a
    row written by hand with the documented columns is a job too."""
    app, ran = sql_app
    first = enqueue_sql(app, conn, "add", "[1, 1]", unique_key="k")
    assert enqueue_sql(app, conn, "add", "[5, 5]", unique_key="k") == first
    assert app.get_job("add").using(unique_key="k").enqueue(7, 7).id == first  # Python meets SQL's key
    python = app.get_job("add").using(unique_key="p").enqueue(2, 2).id
    assert enqueue_sql(app, conn, "add", "[9, 9]", unique_key="p") == python  # and SQL meets Python's
    app.run_until_empty()
    assert sorted(ran) == [2, 4]
    again = enqueue_sql(app, conn, "add", "[3, 3]", unique_key="k")  # its holder ended: taken over
    assert again not in (first, None) and rows(app, conn, "SELECT job_id FROM errands_unique_keys WHERE name = ?",
                                               ("k",))[0]["job_id"] == again
    low = enqueue_sql(app, conn, "add", "[0, 1]", queue="mail")
    high = enqueue_sql(app, conn, "add", "[0, 2]", queue="mail", priority=5, max_attempts=7, timeout=2.5)
    later = enqueue_sql(app, conn, "add", "[0, 3]", queue="mail", delay=3600)
    got = {r["id"]: r for r in rows(app, conn, "SELECT id, queue, priority, max_attempts, timeout, "
                                    f"{app.store.dialect.epoch_sql('available_at')} - "
                                    f"{app.store.dialect.epoch_sql('created_at')} AS wait FROM errands_jobs")}
    assert (got[high]["queue"], got[high]["priority"], got[high]["max_attempts"], float(got[high]["timeout"])) \
        == ("mail", 5, 7, 2.5)
    assert (got[low]["priority"], got[low]["max_attempts"], got[low]["timeout"]) == (0, wire.DEFAULT_MAX_ATTEMPTS, None)
    assert abs(float(got[later]["wait"]) - 3600) < 1 and abs(float(got[low]["wait"])) < 1
    ran.clear()
    app.run_until_empty(["mail"], concurrency=1)
    assert ran == [2, 1]  # priority first; the delayed one waits
    assert app.job_state(later) is JobState.DELAYED
    # The wire format's lowest level (docs/wire-format.md, "Writing the row yourself"): the columns it
    # names, the payload as documented, make a job a worker runs.
    d = app.store.dialect
    payload = '{"args": [4, 5], "kwargs": {"c": 1}}'
    conn.cursor().execute(d.q("INSERT INTO {jobs} (queue, name, payload, max_attempts, available_at, created_at) "
                              "VALUES ('default', 'add', {p}, 3, {now}, {now})"), (payload,))
    ran.clear()
    app.run_until_empty()
    assert sorted(ran) == [6, 10]  # (6: the job that took key k over)


BAD = [  # (what, name, args, options)
    ("name", "", "[]", {}),
    ("name", "x" * 256, "[]", {}),
    ("args", "add", '{"a": 1}', {}),
    ("args", "add", "not json", {}),
    ("kwargs", "add", "[]", {"kwargs": "[1]"}),
    ("queue", "add", "[]", {"queue": "no spaces"}),
    ("priority", "add", "[]", {"priority": 2**31}),
    ("delay", "add", "[]", {"delay": -1}),
    ("unique_key", "add", "[]", {"unique_key": ""}),
    ("max_attempts", "add", "[]", {"max_attempts": 0}),
    ("timeout", "add", "[]", {"timeout": 0}),
]


def test_bad_input_is_refused_with_a_clear_error_and_stores_nothing(backend, sql_app, conn):
    app, _ = sql_app
    for what, name, args, options in BAD:
        expected = "errands_enqueue: " + wire.REFUSALS[what][:30].replace("(", r"\(")
        if args == "not json" and backend == "postgres":  # refused by the jsonb parameter's own input
            expected = "invalid input syntax for type json"
        with pytest.raises(Exception, match=expected):
            enqueue_sql(app, conn, name, args, **options)
    assert rows(app, conn, "SELECT COUNT(*) AS n FROM errands_jobs")[0]["n"] == 0
    assert rows(app, conn, "SELECT COUNT(*) AS n FROM errands_unique_keys")[0]["n"] == 0


DROP_ENTRY = {"sqlite": "DROP VIEW errands_enqueue", "postgresql": "DROP FUNCTION errands_enqueue",
              "mysql": "DROP PROCEDURE errands_enqueue"}


def test_the_doctor_reports_the_entry_point_and_its_absence(backend, sql_app, conn, caplog):
    """In place after a migration; missing once dropped, which the drift check does not mind.  On MySQL
    it goes missing the way it would in production: version 11 migrated by a user who may not create
    routines, passed over with a warning (the version is recorded), and the doctor says what to grant."""
    app, _ = sql_app
    found = diagnose(app).get("sql_enqueue")
    assert found is not None and found.status is Status.OK and "wire format version 1" in found.detail
    conn.cursor().execute(DROP_ENTRY[app.store.dialect.name])
    if app.store.dialect.name == "mysql":
        _migrate_without_create_routine(app, conn, caplog)
    report = diagnose(app)
    missing = report.get("sql_enqueue")
    assert missing is not None and missing.status is Status.WARN and "migrate --sql" in (missing.fix or "")
    if app.store.dialect.name == "mysql":
        assert "CREATE ROUTINE" in (missing.fix or "")
    drift = report.get("schema_drift")
    assert drift is not None and drift.status is Status.OK  # not a table: the drift check does not mind


def _migrate_without_create_routine(app: Errands, conn: Connection, caplog: pytest.LogCaptureFixture) -> None:
    database = urlsplit(app.database_url).path.lstrip("/")
    user = "errands_lim_" + database[-6:]
    cur = conn.cursor()
    cur.execute("DELETE FROM errands_schema WHERE version = 11")
    cur.execute(f"CREATE USER '{user}'@'%'")
    try:
        cur.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON {database}.* TO '{user}'@'%'")
        limited = Errands(app.database_url.replace("//root@", f"//{user}@"))
        try:
            with caplog.at_level("WARNING", logger="errands.store"):
                assert limited.migrate() == [11]
        finally:
            limited.store.close()
    finally:
        cur.execute(f"DROP USER '{user}'@'%'")
    assert "refused for want of a privilege" in caplog.text and "denied" in caplog.text


WAITING_FOR_THE_KEY = {  # (param: the second caller's session)
    "postgresql": "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
    # The procedure's statement that waits (its locking read of the key, which meets the first caller's
    # uncommitted row) shows as the session's INFO; INNODB_TRX misses some waits.
    "mysql": "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID = %s "
             "AND (INFO LIKE 'SELECT job_id%%' OR INFO LIKE 'INSERT IGNORE%%')",
}


@pytest.mark.parametrize("backend", ["postgres", "mariadb"])
def test_two_callers_racing_for_one_new_key_make_one_job(backend, sql_app, conn):
    """A caller whose transaction holds a new key it has not committed makes a second caller of the
    same key wait on the key's row; once the first commits, the second gets the first's id and leaves
    no job of its own (SQLite has one writer: no race to have)."""
    app, _ = sql_app
    d = app.store.dialect
    other = d.connect()
    session = cast(Any, other).info.backend_pid if d.name == "postgresql" else cast(Any, other).thread_id()
    watcher = d.connect()
    second: list[int | None] = []
    racer = threading.Thread(target=lambda: second.append(enqueue_sql(app, other, "add", "[2, 2]", unique_key="race")))
    try:
        d.begin(conn)
        first = enqueue_sql(app, conn, "add", "[1, 1]", unique_key="race")
        racer.start()
        wait_for(lambda: rows(app, watcher, WAITING_FOR_THE_KEY[d.name], (session,))[0]["n"] >= 1,
                 timeout=scaled(10), message="the second caller to wait for the key's row")
    finally:
        conn.cursor().execute("COMMIT")
        if racer.is_alive() or second:
            racer.join(scaled(10))
        other.close()
    try:
        assert second == [first]
        assert [r["id"] for r in rows(app, watcher, "SELECT id FROM errands_jobs")] == [first]
    finally:
        watcher.close()
