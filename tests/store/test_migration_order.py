"""Migrations are one ordered list per dialect: versions 1 to N, N the code's schema version, the
same N everywhere; and a database built one version at a time ends up as one built in one go
(tables, columns with their types, nullability and defaults, indexes with their columns, order
and conditions, as the server's catalog reports them)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from helpers import BACKENDS, DIALECT_OF

from errands import Errands
from errands.core.errors import SchemaError
from errands.diagnostics.checks import dialect_facts
from errands.diagnostics.context import DoctorContext
from errands.diagnostics.schema import expected_schema
from errands.store import open_store
from errands.store.dialects.base import SchemaVersion, in_version_order
from errands.store.registry import BACKENDS as REGISTERED

ONE_PER_DIALECT = [b for i, b in enumerate(BACKENDS) if DIALECT_OF[b] not in {DIALECT_OF[a] for a in BACKENDS[:i]}]
"""SQLite, PostgreSQL and one MariaDB mode: the claim mode plays no part in migrating."""

DDL_URLS = {"sqlite": "sqlite:///unused.db", "postgresql": "postgresql://h/db", "mysql": "mysql://u@h/db"}
"""A store per dialect that never connects: only its DDL is read."""


def _catalogue(app: Errands) -> tuple[dict[str, list[tuple[str, Any]]], dict[str, Any], set[str]]:
    """Tables with their columns in order, indexes and invalid indexes, read by ``errands doctor``'s
    catalog reader of the dialect (which reads without migrating)."""
    store = app.store
    live = dialect_facts(store.dialect.name).live_schema(DoctorContext(app, store, expected_schema(store)))
    return {t: list(columns.items()) for t, columns in live.tables.items()}, live.indexes, live.invalid


@pytest.mark.parametrize("backend", ONE_PER_DIALECT, indirect=True)
def test_one_version_at_a_time_builds_what_one_go_builds(db_url):
    app = Errands(db_url)
    store = app.store
    try:
        last = store.dialect.schema_version
        assert store.migrate() == list(range(1, last + 1))
        at_once = _catalogue(app)
        tables, indexes, invalid = at_once
        assert set(tables) == set(expected_schema(store).tables)  # the reader saw every table errands makes
        assert indexes[store.dialect.claim_index_name].descending is not None and not invalid

        for table in tables:  # the same database again, empty: no second server database to set up
            store.db.run_unchecked(lambda cur, t=table: cur.execute(f"DROP TABLE {t}"))
        assert store.current_version() is None

        for version in range(1, last + 1):
            assert store.pending_migration_steps(to=version) == len(store.dialect.migrations()[version - 1][1])
            assert store.migrate(to=version) == [version]
            assert store.current_version() == version
        assert store.migrate() == [] and store.pending_migration_steps() == 0
        assert _catalogue(app) == at_once
    finally:
        app.close()


def test_a_target_outside_the_known_versions_is_refused_and_one_below_the_recorded_does_nothing(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'errands.db'}")
    try:
        for wrong in (0, store.dialect.schema_version + 1):
            with pytest.raises(SchemaError, match=f"cannot migrate to version {wrong}"):
                store.migrate(to=wrong)
        assert store.current_version() is None
        assert store.migrate(to=2) == [1, 2]
        assert store.migrate(to=1) == [] and store.current_version() == 2
    finally:
        store.close()


def test_every_dialect_lists_versions_1_to_n_in_source_order_and_needs_the_last():
    dialects = {b.name: open_store(DDL_URLS[b.name]).dialect for b in REGISTERED}
    for name, dialect in dialects.items():
        migrations = dialect.MIGRATIONS
        assert [m.version for m in migrations] == list(range(1, len(migrations) + 1)), name
        assert dialect.schema_version == migrations[-1].version, name
        assert [v for v, _ in dialect.migrations()] == [m.version for m in migrations], name
        # Source order is version order: each version's steps are written below the one before.
        module = importlib.import_module(type(dialect).__module__ + "_migrations")
        assert migrations is module.MIGRATIONS, name
        lines = [m.steps.__code__.co_firstlineno for m in migrations]
        assert lines == sorted(lines), name
        assert all(m.steps.__module__ == module.__name__ and m.why for m in migrations), name
    assert len({d.schema_version for d in dialects.values()}) == 1, {n: d.schema_version for n, d in dialects.items()}


def test_a_list_with_a_gap_or_out_of_order_is_refused_where_it_is_made():
    def steps(dialect: Any) -> list[Any]:
        return []

    one, two, three = (SchemaVersion(v, "test", steps) for v in (1, 2, 3))
    assert in_version_order(one, two, three) == (one, two, three)
    for wrong in ((one, three), (two, one, three), (two, three), ()):
        with pytest.raises(ValueError, match="versions 1 to N in order"):
            in_version_order(*wrong)
