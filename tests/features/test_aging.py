"""Priority aging end to end (issue 25, point 5): a worker's maintenance raises the priority of jobs
that waited, in every queue (not only the ones it serves), as ``@app.job(age_after=..., age_limit=...)``
stored them; and the options are checked where they are declared."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from helpers import scaled, wait_for

from errands import ConfigurationError, Errands
from errands.core.rows import NewJob


def test_a_workers_maintenance_ages_waiting_jobs(fapp: Errands, spawn) -> None:  # type: ignore[no-untyped-def]
    waited = datetime.now(timezone.utc) - timedelta(minutes=10)
    payload = json.dumps({"args": [], "kwargs": {}})
    [old, young] = fapp.store.jobs.enqueue([
        NewJob("reports.rebuild", "nightly", payload, run_at=waited, age_after=60.0, age_base=0, age_cap=4),
        NewJob("reports.rebuild", "nightly", payload, age_after=60.0, age_base=0, age_cap=4)])
    spawn("-q", "elsewhere", "-c", "1", lease="2")  # maintenance every second; serves another queue
    wait_for(lambda: fapp.store.jobs.get_job(old).priority == 4,  # type: ignore[union-attr]
             timeout=scaled(30), message="the waited job raised to its cap")
    assert fapp.store.jobs.get_job(young).priority == 0  # type: ignore[union-attr]  # it just arrived


def test_aging_options_are_stored_from_the_definition_and_the_call(tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = Errands(f"sqlite:///{tmp_path / 'aging.db'}")

    @app.job(name="test_aging.rebuild", priority=2, age_after=30, age_limit=3)
    def rebuild(n: int) -> None: ...

    @app.job(name="test_aging.tidy", age_after=5)
    def tidy() -> None: ...

    first = rebuild.prepare(1)
    assert (first.age_after, first.age_base, first.age_cap) == (30.0, 2, 5)
    called = rebuild.using(priority=9).prepare(1)
    assert (called.age_after, called.age_base, called.age_cap) == (30.0, 9, 12)  # the cap follows the call's priority
    assert tidy.prepare().age_cap == 10  # age_limit's default
    assert app.store.jobs.get_job(rebuild.enqueue(1).id).age_cap == 5  # type: ignore[union-attr]
    for bad in ({"age_after": 0}, {"age_after": "1m"}, {"age_limit": 3}, {"age_after": 1, "age_limit": 0},
                {"age_after": 1, "age_limit": True}):
        with pytest.raises(ConfigurationError, match="age_"):
            app.job(name=f"bad{len(str(bad))}", **bad)(lambda: None)  # type: ignore[arg-type]
