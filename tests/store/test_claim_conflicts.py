"""A claim that loses to concurrent transactions backs off and spreads its picks, and is no error.

On a multi-primary Galera cluster, workers on different nodes lock nothing of each other's: they pick
the same first ready rows and all but one fail certification at commit, which comes back as deadlock
error 1213.  A claim that lost is tried again after a growing jittered pause, picking at random among
more ready rows each time, so that the workers part; one that still loses after its tries is "no jobs
this round", said once per streak at WARNING, never "ERROR the database refused a claim".  The first
try is the claim as it always was.  The lost commits are played by a dialect whose claim raises 1213.
"""

from __future__ import annotations

import logging
import random
import types
from collections.abc import Iterator
from typing import Any

import pytest
from pymysql.err import OperationalError  # (never pymysql.err.X: see store/dialects/mysql.py)

from errands import Errands
from errands.core.errors import StoreConflict
from errands.core.rows import NewJob
from errands.store import jobs as jobs_module
from errands.store.dialects import mysql as mysql_module
from errands.store.jobs import CLAIM_PAUSE_CAP, CLAIM_TRIES, claim_pause, claim_spread
from errands.worker.admission import Admission
from errands.worker.settings import WorkerSettings
from errands.worker.state import WorkerState

DEADLOCK = (1213, "Deadlock found when trying to get lock; try restarting transaction")


def test_the_pause_grows_jittered_and_the_first_try_is_not_spread() -> None:
    rng = random.Random(7)
    bounds = [claim_pause(attempt, random.Random(0)) for attempt in range(2, 12)]
    for attempt in range(2, 12):
        ceiling = min(CLAIM_PAUSE_CAP, 0.004 * 2 ** (attempt - 2))
        assert ceiling / 2 <= claim_pause(attempt, rng) <= ceiling
    assert bounds[-1] > bounds[0] * 10 and max(bounds) <= CLAIM_PAUSE_CAP
    assert claim_spread(1, 10) == 0  # the common case: exactly the first ready rows, as before
    spreads = [claim_spread(attempt, 10) for attempt in range(2, CLAIM_TRIES + 1)]
    assert spreads == sorted(spreads) and spreads[0] > 0 and len(set(spreads)) == len(spreads)


@pytest.fixture
def losing(app: Errands, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The app's claim loses at commit (1213) the first ``record["lose"]`` times; the spread each try
    asked for and the pauses slept between tries are recorded."""
    record: dict[str, Any] = {"lose": 0, "spreads": [], "pauses": []}
    dialect = app.store.dialect
    claim = dialect.claim

    def losing_claim(cur: Any, *args: Any, spread: int = 0) -> list[Any]:
        record["spreads"].append(spread)
        if record["lose"] > 0:
            record["lose"] -= 1
            claim(cur, *args, spread=spread)  # the picks and the UPDATE happen; the commit is what fails
            raise OperationalError(*DEADLOCK)
        return claim(cur, *args, spread=spread)

    monkeypatch.setattr(dialect, "claim", losing_claim)
    monkeypatch.setattr(jobs_module, "time", types.SimpleNamespace(sleep=record["pauses"].append))
    monkeypatch.setattr(mysql_module, "_rng", random.Random(3))  # the spread's picks, the same each run
    yield record


@pytest.mark.parametrize("backend", ["mariadb", "mariadb-update"])
def test_a_losing_claim_backs_off_and_spreads_its_picks(app: Errands, losing: dict[str, Any]) -> None:
    ids = app.store.jobs.enqueue([NewJob("x", "default", "{}") for _ in range(100)])
    losing["lose"] = 3
    got = [row.id for row in app.store.jobs.claim("w1", ["default"], 5, 30)]
    spreads, pauses = losing["spreads"], losing["pauses"]
    assert spreads[0] == 0 and spreads[1:] == sorted(spreads[1:]) and spreads[-1] > spreads[1] > 0
    assert len(pauses) == 3 and pauses[0] < pauses[-1]
    assert len(got) == 5 and got != ids[:5]  # picked among more than the first five ready rows
    assert set(got) <= set(ids[:5 + spreads[-1] + app.store.dialect.claim_window])  # yet from the next few
    # The rolled-back tries reserved nothing: only the last try's rows are held.
    assert app.store.jobs.reserved_by("w1") == sorted(got)


@pytest.mark.parametrize("backend", ["mariadb"])
def test_a_claim_that_loses_every_try_is_a_conflict_and_keeps_other_queues_rows(
        app: Errands, losing: dict[str, Any]) -> None:
    app.store.jobs.enqueue([NewJob("x", q, "{}") for q in ("first", "second") for _ in range(3)])
    losing["lose"] = CLAIM_TRIES
    with pytest.raises(StoreConflict):
        app.store.jobs.claim("w1", ["first"], 2, 30)
    assert len(losing["spreads"]) == CLAIM_TRIES and len(losing["pauses"]) == CLAIM_TRIES - 1
    # The first queue's claim committed; the second one's lost every try: the first's rows are handed out.
    losing["spreads"].clear()
    state = {"calls": 0}
    lose_after_first = losing_after(app, state)
    rows = lose_after_first(["first", "second"])
    assert [r.queue for r in rows] == ["first"] * 3
    assert sorted(app.store.jobs.reserved_by("w2")) == sorted(r.id for r in rows)


def losing_after(app: Errands, state: dict[str, int]) -> Any:
    """Claim as ``w2`` with every try after the first queue's losing at commit."""
    dialect = app.store.dialect
    claim = dialect.claim

    def claim_queues(queues: list[str]) -> list[Any]:
        def lose_later(cur: Any, *args: Any, spread: int = 0) -> list[Any]:
            state["calls"] += 1
            if state["calls"] > 1:
                raise OperationalError(*DEADLOCK)
            return claim(cur, *args, spread=spread)

        dialect.claim = lose_later  # type: ignore[method-assign]
        return app.store.jobs.claim("w2", queues, 4, 30)

    return claim_queues


def test_the_worker_says_a_lost_claim_once_per_streak_never_as_an_error(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    app = Errands(f"sqlite:///{tmp_path}/claims.db")
    state = WorkerState()
    admission = Admission(app, WorkerSettings.of(["default"]), state, "w1", 30.0)
    outcomes = iter([StoreConflict("mysql: (1213, 'Deadlock found')")] * 3 + [[]])

    def claim(*args: Any) -> Any:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(app.store.jobs, "claim", claim)
    try:
        with caplog.at_level(logging.INFO, logger="errands.worker"):
            assert [admission.take(5) for _ in range(3)] == [[], [], []]  # no jobs this round, not a paused worker
            assert admission.contended == 3 and state.db_ok.is_set()
            assert admission.take(5) == [] and admission.contended == 0
    finally:
        app.store.close()
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert not [m for level, m in said if level >= logging.ERROR], said
    assert len([m for level, m in said if level == logging.WARNING and "lost to concurrent" in m]) == 1
    assert any("succeed again after 3" in m for _, m in said)
