"""How a MySQL store settles its claim mode: the configured setting is kept apart from the mode in
use, and ``auto`` asks the server once, with the same probe ``errands doctor`` runs."""

from __future__ import annotations

import pytest

from errands.core.errors import ConfigurationError
from errands.core.rows import NewJob
from errands.store import open_store

pytestmark = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


def test_the_setting_and_where_it_came_from(db_url):
    for extra, kwargs, setting, set_by in [("", {}, "auto", None),
                                           ("?claim=update", {}, "update", "url"),
                                           ("?claim=update", {"claim": "skip_locked"}, "skip_locked", "argument"),
                                           ("", {"claim": "update"}, "update", "argument")]:
        store = open_store(db_url + extra, **kwargs)
        d = store.dialect
        assert (d.claim_setting, d.claim_set_by, d.claim_mode) == (setting, set_by, setting)
        store.close()
    with pytest.raises(ConfigurationError, match="claim mode must be one of auto, skip_locked, update"):
        open_store(db_url + "?claim=fast")


def test_auto_settles_at_the_first_claim_and_keeps_its_setting(app, db_url):
    store = open_store(db_url)
    try:
        assert store.db.run(store.dialect.supports_skip_locked) is True  # MariaDB 10.6+, MySQL 8
        store.jobs.enqueue([NewJob("x", "default", "{}")])
        claimed = store.jobs.claim("w1", ["default"], 5, 30.0)
        assert [job.id for job in claimed] == [job.id for job in store.jobs.list_jobs()]
        assert store.dialect.claim_mode == "skip_locked" and store.dialect.claim_setting == "auto"
    finally:
        store.close()


def test_auto_probes_even_when_the_first_claim_finds_its_queue_paused(app, db_url):
    """The probe runs before the paused check, so a first claim that takes nothing still settles
    the mode (the old first claim returned early on a paused queue yet recorded ``skip_locked``,
    which on a server without it made every later claim fail instead of falling back)."""
    store = open_store(db_url)
    try:
        store.features.set_paused("default", True)
        assert store.jobs.claim("w1", ["default"], 5, 30.0) == []
        assert store.dialect.claim_mode == "skip_locked"
    finally:
        store.close()


def test_forced_update_never_probes(app, db_url):
    store = open_store(db_url, claim="update")
    try:
        store.jobs.enqueue([NewJob("x", "default", "{}")])
        assert len(store.jobs.claim("w1", ["default"], 5, 30.0)) == 1
        assert store.dialect.claim_mode == "update" and store.dialect.lock_rows_skip == store.dialect.lock_rows
    finally:
        store.close()
