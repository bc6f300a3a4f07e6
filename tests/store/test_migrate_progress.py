"""``migrate(progress=...)`` against ``pending_migration_steps()``: the CLI's bar is as long as
the count and every step ticks it once, also a guarded step found already in place."""

from __future__ import annotations

import pytest

from errands.store import open_store
from errands.store.dialects.base import Step


def test_a_fresh_migration_ticks_every_counted_step(db_url):
    store = open_store(db_url)
    try:
        every = sum(len(steps) for _, steps in store.dialect.migrations())
        assert store.pending_migration_steps() == every
        ticks: list[int] = []
        assert store.migrate(progress=ticks.append) == [v for v, _ in store.dialect.migrations()]
        assert sum(ticks) == every
        assert store.pending_migration_steps() == 0
        ticks.clear()
        assert store.migrate(progress=ticks.append) == [] and ticks == []
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_a_version_below_the_highest_is_counted_and_its_skipped_steps_tick(app):
    """A lost version row below the highest recorded one: ``migrate()`` redoes that version (its
    guarded steps find their work in place and are skipped), so the count must include it."""
    store = app.store
    version_2 = dict(store.dialect.migrations())[2]
    assert any(isinstance(step, Step) for step in version_2)
    store.db.run(lambda cur: cur.execute(store.dialect.q("DELETE FROM {schema} WHERE version = 2")))
    assert store.current_version() == store.dialect.schema_version  # the highest recorded version hides the gap

    assert store.pending_migration_steps() == len(version_2)
    ticks: list[int] = []
    assert store.migrate(progress=ticks.append) == [2]
    assert sum(ticks) == len(version_2)
    assert store.pending_migration_steps() == 0
