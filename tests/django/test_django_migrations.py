"""errands' Django migrations: each brings errands' schema to its own version, the last to the
version the code needs, so a new errands schema version cannot ship without its Django migration."""

from __future__ import annotations

import importlib

from conftest import use_database
from django.core.management import call_command
from django.db import connections
from django.db.migrations.loader import MigrationLoader

from errands.contrib.django.schema import DDL_URLS
from errands.store import open_store


def _planned_versions() -> list[tuple[str, int]]:
    """Each errands Django migration, in the order Django runs them, with its SCHEMA_VERSION."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    [leaf] = graph.leaf_nodes("errands")
    return [(name, importlib.import_module(f"errands.contrib.django.migrations.{name}").SCHEMA_VERSION)
            for app, name in graph.forwards_plan(leaf) if app == "errands"]


def test_each_django_migration_moves_the_schema_on_and_the_last_reaches_the_codes_version() -> None:
    planned = _planned_versions()
    versions = [version for _, version in planned]
    assert versions == sorted(set(versions)) and versions[0] >= 1, planned
    for url in DDL_URLS.values():
        assert versions[-1] == open_store(url).dialect.schema_version, (url, planned)


def test_django_migrate_one_migration_at_a_time_records_each_ones_version(backend: str, db_url: str) -> None:
    """``manage.py migrate errands <name>``, one name after the other, on a database Django never
    migrated: after each, errands' recorded version is that migration's own."""
    store = open_store(db_url)
    use_database(db_url)
    try:
        for name, version in _planned_versions():
            call_command("migrate", "errands", name, verbosity=0)
            assert store.current_version() == version, name
        assert version == store.dialect.schema_version
    finally:
        store.close()
        connections.close_all()
