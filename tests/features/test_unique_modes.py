"""Unique modes through the job options (issue 25, point 2), on every backend: ``on_conflict="replace"``,
one waiting plus one running job per key (``unique_states``), and a debounced burst from four
processes that runs once, with one of the last calls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import APPS, cli_env, drain, scaled, wait_for

from errands import Errands, JobState


def test_replace_gives_the_waiting_job_the_latest_call(app: Errands) -> None:
    runs: list[tuple[int, list[str]]] = []

    @app.job(name="sync_customer", unique_key=lambda customer_id, fields: f"sync:{customer_id}",
             on_conflict="replace")
    def sync_customer(customer_id: int, fields: list[str]) -> None:
        runs.append((customer_id, fields))

    first = sync_customer.using(delay=3600).enqueue(1, ["name"])
    again = sync_customer.using(priority=5).enqueue(1, ["name", "email"])
    other = sync_customer.enqueue(2, ["name"])
    pair = app.enqueue_many([sync_customer.prepare(3, ["a"]), sync_customer.prepare(3, ["b"])])
    assert again.id == first.id != other.id and pair[0].id == pair[1].id
    row = app.store.jobs.get_job(first.id)
    assert row is not None and row.priority == 5 and row.state(app.store.now()) is JobState.READY
    drain(app)
    assert sorted(runs) == [(1, ["name", "email"]), (2, ["name"]), (3, ["b"])]


def test_one_waiting_plus_one_running_job_per_key(app: Errands) -> None:
    runs: list[tuple[str, int]] = []
    during: dict[str, list[int]] = {}

    @app.job(name="refresh", unique_key="refresh", unique_states=("waiting",))
    def refresh(n: int) -> None:
        runs.append(("refresh", n))
        if n == 1:  # while this run holds the key: a new job waits beside it, and takes the next call
            during["refresh"] = [refresh.enqueue(2).id, refresh.enqueue(3).id]

    @app.job(name="refresh_default", unique_key="refresh_default")
    def refresh_default(n: int) -> None:
        runs.append(("default", n))
        if n == 1:  # by default the running job holds its key: the call returns it
            during["default"] = [refresh_default.enqueue(2).id]

    first, plain = refresh.enqueue(1), refresh_default.enqueue(1)
    drain(app)
    second, third = during["refresh"]
    assert second == third != first.id and during["default"] == [plain.id]
    assert sorted(runs) == [("default", 1), ("refresh", 1), ("refresh", 2)]


def _burst(db_url: str, tmp_path: Path, processes: int, count: int) -> list[str]:
    """Start the enqueuers, let them go together, and return each one's printed ids."""
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = [subprocess.Popen([sys.executable, str(APPS / "enqueue_debounced.py"), db_url, f"p{n}", str(count),
                               str(gate)], env=cli_env(db_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for n in range(processes)]
    wait_for(lambda: len(list(gate.glob("ready-*"))) == processes or any(p.poll() is not None for p in procs),
             message="the enqueueing processes to be ready")
    (gate / "go").touch()
    outputs = [p.communicate(timeout=scaled(120)) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    return [out.strip() for out, _ in outputs]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)  # the claim comes after
def test_a_debounced_burst_from_four_processes_runs_once_with_a_last_call(app: Errands, db_url: str,
                                                                          tmp_path: Path) -> None:
    runs: list[tuple[str, int]] = []

    @app.job(name="debounced")  # the enqueuers' definition carries the debounce (enqueue_debounced.py)
    def debounced(tag: str, i: int) -> None:
        runs.append((tag, i))

    count = 10
    ids = _burst(db_url, tmp_path, processes=4, count=count)
    assert len(set(ids)) == 1 and len(ids[0].split()) == 1  # every call of every process: one job
    [row] = app.store.jobs.list_jobs()
    assert row.available_at > app.store.now()  # still in its quiet period: nothing ran mid-burst
    assert drain(app) == 0
    # The quiet period passes (the job falls due), and a worker drains the queue.
    store = app.store
    store.db.run(lambda cur: cur.execute(store.dialect.q("UPDATE {jobs} SET available_at = {now}")), write=True)
    assert drain(app) == 1 and drain(app) == 0
    # Whichever process committed last wrote its own last call.
    assert len(runs) == 1 and runs[0] in [(f"p{n}", count - 1) for n in range(4)], runs

