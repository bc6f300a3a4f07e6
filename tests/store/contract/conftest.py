"""One migrated database per backend for the whole contract package, emptied before each test.

The shared fixtures of ``tests/conftest.py`` give each test a database of its own; on MariaDB that
is a new database with some twenty tables copied into it, about a second a test here, which would
put this package (some ninety tests a backend) at minutes.  The contract's tests drive store verbs
only, so they share one database per dialect (migrated once, by ``store.migrate()`` itself, so the
schema contract looks at what a migration made) and each test starts from empty tables.  Ids keep
growing across tests (the tables are emptied, their sequences are not): no test assumes an id.

Each test gets a :class:`~errands.store.Store` opened afresh on that database (so nothing a
dialect caches, such as MySQL's paused queues or claim mode, leaks from one test to the next),
parametrised by the shared ``backend`` fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import DIALECT_OF

from errands.store import Store, open_store


class _Databases:
    """A migrated database per dialect, made on first use; MariaDB's two modes share one."""

    def __init__(self, servers: dict[str, object], tmp: Path) -> None:
        self.servers = servers
        self.tmp = tmp
        self.urls: dict[str, str] = {}
        self.drops: list[Callable[[], None]] = []

    def url(self, backend: str) -> str:
        dialect = DIALECT_OF[backend]
        if dialect not in self.urls:
            self.urls[dialect] = self._make(dialect)
        base = self.urls[dialect]
        return base + "?claim=update" if backend == "mariadb-update" else base

    def _make(self, dialect: str) -> str:
        if dialect == "sqlite":
            url = f"sqlite:///{self.tmp / 'contract.db'}"
        elif dialect == "postgresql":
            pg = self.servers["postgres"]
            url, schema = pg.new_url()  # type: ignore[attr-defined]
            self.drops.append(lambda: pg.drop(schema))  # type: ignore[attr-defined]
        else:
            my = self.servers["mysql"]
            url, name = my.new_url()  # type: ignore[attr-defined]
            self.drops.append(lambda: my.drop(name))  # type: ignore[attr-defined]
        migrator = open_store(url)
        try:
            migrator.migrate()
        finally:
            migrator.close()
        return url

    def close(self) -> None:
        for drop in self.drops:
            drop()


@pytest.fixture(scope="session")
def _contract_databases(_servers: dict[str, object], tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Databases]:
    databases = _Databases(_servers, tmp_path_factory.mktemp("contract"))
    yield databases
    databases.close()


def _empty(store: Store) -> None:
    """Delete every row of errands' tables but the schema versions, in one transaction."""
    tables = [name for key, name in sorted(store.dialect.tables.items()) if key != "schema"]

    def delete(cur) -> None:  # type: ignore[no-untyped-def]
        for table in tables:
            cur.execute(f"DELETE FROM {table}")

    store.db.run(delete, write=True)


@pytest.fixture
def store(backend: str, _contract_databases: _Databases) -> Iterator[Store]:
    """A store on the backend's contract database, every table empty."""
    opened = open_store(_contract_databases.url(backend))
    try:
        _empty(opened)
        yield opened
    finally:
        opened.close()


@pytest.fixture
def other_store(backend: str, _contract_databases: _Databases) -> Iterator[Store]:
    """A second store on the same database (another process's connections)."""
    opened = open_store(_contract_databases.url(backend))
    try:
        yield opened
    finally:
        opened.close()
