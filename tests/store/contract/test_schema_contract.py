"""The schema and the registry: every backend runs this contract, and its live tables have the job
shape that ``errands.core.columns`` declares, each column of its kind's type and nullability."""

from __future__ import annotations

import re
from datetime import timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from helpers import BACKENDS, DIALECT_OF

from errands.core.columns import FAILED, JOBS, Column
from errands.store import Store, open_store, registry
from errands.store.dialects.base import TABLES

from .support import enqueue, rows

SHAPES = {"jobs": JOBS, "failed": FAILED}


def test_every_registered_backend_runs_the_contract(request: pytest.FixtureRequest) -> None:
    """The ``backend`` fixture parametrises these tests with every backend of the registry: a new
    backend cannot be registered without running the contract."""
    module = request.node.parent
    assert isinstance(module, pytest.Module)
    collected = {item.callspec.params["backend"] for item in module.collect()
                 if isinstance(item, pytest.Function) and hasattr(item, "callspec")
                 and "backend" in item.callspec.params}
    assert collected == set(BACKENDS)
    assert {DIALECT_OF[b] for b in collected} == {b.name for b in registry.BACKENDS}


def test_the_store_speaks_the_backends_dialect(store: Store, backend: str) -> None:
    entry = registry.by_name(store.dialect.name)
    assert store.dialect.name == DIALECT_OF[backend]
    assert type(store.dialect) is registry.dialect_class(entry)
    if backend == "mariadb-update":
        assert store.dialect.claim_mode == "update"  # type: ignore[attr-defined]


def test_migrate_is_at_the_codes_version_and_a_second_run_does_nothing(store: Store) -> None:
    assert store.current_version() == store.dialect.schema_version
    assert store.migrate() == []
    assert store.current_version() == store.dialect.schema_version
    for key in TABLES:  # every table the statement templates name
        assert rows(store, "SELECT COUNT(*) AS n FROM {" + key + "}")[0]["n"] >= 0, key


# ---------------------------------------------------------------------------------- column shapes
def _live_sqlite(store: Store, table: str) -> dict[str, tuple[str, bool]]:
    found = rows(store, f"PRAGMA table_info({table})")
    # An INTEGER PRIMARY KEY is the rowid: never NULL, whatever its notnull flag says.
    return {r["name"]: (r["type"].upper(), not (r["notnull"] or (r["pk"] and r["type"].upper() == "INTEGER")))
            for r in found}


def _live_postgres(store: Store, table: str) -> dict[str, tuple[str, bool]]:
    found = rows(store, "SELECT column_name, data_type, character_maximum_length, is_nullable "
                        "FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = {p}",
                 [table])
    return {r["column_name"]: (r["data_type"] + ("" if r["character_maximum_length"] is None
                                                 else f"({r['character_maximum_length']})"),
                               r["is_nullable"] == "YES") for r in found}


def _live_mysql(store: Store, table: str) -> dict[str, tuple[str, bool]]:
    found = rows(store, "SELECT column_name AS name, column_type AS type, is_nullable AS nullable "
                        "FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = {p}",
                 [table])
    return {r["name"]: (_mysql_type(str(r["type"])), r["nullable"] == "YES") for r in found}


def _mysql_type(sql_type: str) -> str:
    """A MySQL type as COLUMN_TYPE spells it in MySQL 8: no integer display width (MariaDB: int(11))."""
    spelled = sql_type.lower().replace("integer", "int")
    return re.sub(r"\b(tinyint|smallint|mediumint|int|bigint)\(\d+\)", r"\1", spelled)


def _postgres_type(sql_type: str) -> str:
    """A declared PostgreSQL type as information_schema spells it."""
    spelled = sql_type.lower().replace("timestamptz", "timestamp with time zone")
    return re.sub(r"^varchar\((\d+)\)$", r"character varying(\1)", spelled)


LIVE = {"sqlite": _live_sqlite, "postgresql": _live_postgres, "mysql": _live_mysql}
DECLARED = {"sqlite": str.upper, "postgresql": _postgres_type, "mysql": _mysql_type}


def _shapes(store: Store, table: str, columns: tuple[Column, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    dialect = store.dialect
    live = LIVE[dialect.name](store, dialect.tables[table])
    declared = {c.name: (DECLARED[dialect.name](dialect.column_types[c.kind]), c.nullable) for c in columns}
    return live, declared


@pytest.mark.parametrize("table", sorted(SHAPES))
def test_every_declared_column_has_its_kinds_type_and_nullability(store: Store, table: str) -> None:
    live, declared = _shapes(store, table, SHAPES[table])
    assert {name: live.get(name) for name in declared} == declared


@pytest.mark.parametrize("table", sorted(SHAPES))
def test_the_live_table_holds_no_undeclared_column(store: Store, table: str) -> None:
    live, declared = _shapes(store, table, SHAPES[table])
    assert sorted(live) == sorted(declared)


# ---------------------------------------------------------------------------------- the clock
def test_now_reads_the_databases_clock_in_utc(store: Store) -> None:
    before = store.now()
    [read] = rows(store, "SELECT {now} AS now")
    after = store.now()
    assert before.utcoffset() == timezone.utc.utcoffset(None)
    assert before <= store.dialect.to_datetime(read["now"]) <= after


def test_times_read_back_in_utc_whatever_the_sessions_time_zone(store: Store, backend: str,
                                                                request: pytest.FixtureRequest,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A session whose time zone is not UTC still reads aware UTC times (``Dialect.to_datetime``: "an
    aware UTC datetime").  PostgreSQL: libpq sets the session's zone from PGTZ, as a server's
    ``timezone`` setting would; MySQL's dialect sets +00:00 itself; SQLite keeps epoch seconds."""
    monkeypatch.setenv("PGTZ", "Asia/Kolkata")
    zoned = open_store(store.url)
    try:
        [job_id] = enqueue(zoned, delay=60.0)
        row = zoned.jobs.get_job(job_id)
        assert row is not None
        offsets = {t.utcoffset() for t in (zoned.now(), row.created_at, row.available_at)}
    finally:
        zoned.close()
    assert offsets == {timedelta(0)}


def _with_query(url: str, option: str) -> str:
    return url + ("&" if "?" in url else "?") + option


def test_the_urls_driver_settings_reach_the_session_as_written(store: Store, backend: str,
                                                                request: pytest.FixtureRequest) -> None:
    """What the URL says about the connection arrives unchanged, spaces included (libpq reads ``+`` as
    a plus sign, not a space)."""
    if backend == "postgres":
        schema = rows(store, "SELECT current_schema() AS s")[0]["s"]
        url = store.url.split("?")[0] + "?options=" + quote(f"-c search_path={schema} -c statement_timeout=4321")
        read, expected = "SHOW statement_timeout", "4321ms"
    elif backend == "sqlite":
        url, read, expected = _with_query(store.url, "busy_timeout=4321"), "PRAGMA busy_timeout", 4321
    else:
        url, read, expected = _with_query(store.url, "claim=skip_locked"), "", "skip_locked"
    configured = open_store(url)
    try:
        if read:
            got = configured.db.run(lambda cur: (cur.execute(read), cur.fetchone()[0])[1])
        else:
            got = configured.dialect.claim_setting  # type: ignore[attr-defined]
    finally:
        configured.close()
    assert got == expected
