"""EXPLAIN guards: the claim query must stay an index range scan with no sort, on every backend.

If someone changes the claim's WHERE/ORDER BY or the claim index so that they no
longer match, draining slows down with the queue's length; these tests catch it.
"""

from __future__ import annotations

import pytest

from errands.core.rows import NewJob
from errands.store import fairness


def fill(app, n: int = 3000) -> None:
    jobs = [NewJob("x", "default" if i % 3 else "other", "{}", priority=i % 5, delay=0 if i % 4 else 600,
                   fairness_key=f"tenant{i % 7}" if i % 2 else None)  # half of them take turns
            for i in range(n)]
    app.store.jobs.enqueue(jobs)
    app.store.jobs.claim("w", ["default"], 50, 30)  # some reserved rows too
    stats = {"sqlite": "ANALYZE", "postgresql": "ANALYZE {jobs}", "mysql": "ANALYZE TABLE {jobs}"}

    def analyze(cur):
        cur.execute(app.store.dialect.q(stats[app.store.dialect.name]))
        if cur.description:
            cur.fetchall()

    app.store.db.run(analyze)


def test_claim_uses_the_claim_index_without_sorting(app):
    fill(app)
    plan = app.store.jobs.explain_claim("default", 10)
    index = f"{app.store.dialect.t_jobs}_claim"
    assert index in plan, plan
    dialect = app.store.dialect.name
    if dialect == "sqlite":
        assert "SEARCH" in plan and "TEMP B-TREE" not in plan, plan
    elif dialect == "postgresql":
        assert "Index Scan" in plan and "Sort" not in plan and "Seq Scan" not in plan, plan
    else:
        access = plan.split(" | ")[3]
        assert access in ("ref", "range") and "filesort" not in plan.lower(), plan


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)  # no claim in it
def test_the_fairness_floor_is_one_probe_of_the_claim_index(app):
    """The turn being served (read by every keyed enqueue) walks the claim index too, without sorting."""
    fill(app)
    d = app.store.dialect
    plan = app.store.db.run(lambda cur: (cur.execute(d.explain_prefix + d.q(fairness.SERVING), ("default", 2)),
                                         "\n".join(" | ".join(str(v) for v in row) for row in cur.fetchall()))[1])
    assert f"{d.t_jobs}_claim" in plan, plan
    if d.name == "sqlite":
        assert "TEMP B-TREE" not in plan, plan
    elif d.name == "postgresql":
        assert "Index" in plan and "Sort" not in plan and "Seq Scan" not in plan, plan
    else:
        assert plan.split(" | ")[3] in ("ref", "range") and "filesort" not in plan.lower(), plan
