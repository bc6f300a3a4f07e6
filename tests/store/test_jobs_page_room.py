"""PostgreSQL's jobs table leaves three fifths of each page free (schema version 12, issue 29): a claim updates
every row of a page in one transaction, and each new row version written on its own page costs less WAL
(only the changed bytes logged, no lock record of its own).  The WAL itself is measured in bench/costs.py."""

from __future__ import annotations

import pytest

from errands.core.rows import NewJob


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_jobs_table_keeps_room_for_the_claims_new_row_versions(app):
    d = app.store.dialect

    def options(cur):
        cur.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (d.t_jobs,))
        return list(cur.fetchone()[0])

    assert "fillfactor=40" in app.store.db.run(options)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_claimed_row_keeps_its_page(app):
    """The claim's new version lands beside the old one: the row's page (ctid's block) does not change."""
    d = app.store.dialect
    app.store.jobs.enqueue([NewJob("x", "default", "{}") for _ in range(200)])

    def pages(cur):
        cur.execute(d.q("SELECT id, (ctid::text::point)[0] FROM {jobs} ORDER BY id"))
        return dict(cur.fetchall())

    before = app.store.db.run(pages)
    assert len(app.store.jobs.claim("w", ["default"], 200, 30)) == 200
    assert app.store.db.run(pages) == before
