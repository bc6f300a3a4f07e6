"""Claims after a remembered position (issue 29): cheap under a pinned snapshot, and no job lost or doubled.

A claim from the start walks every dead entry a pinned snapshot keeps in the claim index; a claim after
the worker's last claimed key seeks past them.  These tests hold the policy (when a claim starts after
the position), the SQL (the index seeks to the key: buffers counted with EXPLAIN under a real pinned
snapshot, never timed), and the order: jobs that lie before the position (a higher priority, a released
job with a lower id) are claimed by the next claim from the start.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from errands.core.rows import NewJob
from errands.store.dialects import claim_positions
from errands.store.dialects.claim_positions import CHEAP, RESCAN_MAX, RESCAN_RATIO, QueuePosition


def _row(priority: int, turn: int, job_id: int) -> tuple[Any, ...]:
    """A claimed row with only the position's columns filled."""
    row: list[Any] = [None] * 20
    row[claim_positions._PRIORITY], row[claim_positions._TURN], row[claim_positions._ID] = priority, turn, job_id
    return tuple(row)


# ---------------------------------------------------------------------------- the policy (no database)

def test_a_cheap_claim_from_the_start_is_always_made():
    position = QueuePosition()
    assert position.after(0.0) is None  # never claimed: from the start
    position.claimed([_row(0, 0, 7)], full=True, cost=CHEAP / 10, now=0.0)
    assert position.key == (0, 0, 7)
    assert position.after(0.0) is None  # cheap: every claim from the start, the exact order


def test_a_costly_claim_from_the_start_is_repeated_after_a_gap_in_proportion_capped():
    position = QueuePosition()
    position.claimed([_row(3, 1, 5), _row(3, 2, 9)], full=True, cost=0.01, now=100.0)
    assert position.after(100.0) == (3, 2, 9)
    gap = RESCAN_RATIO * 0.01
    assert position.after(100.0 + gap * 0.9) == (3, 2, 9)
    assert position.after(100.0 + gap) is None
    position.claimed([_row(3, 2, 12)], full=False, cost=0.0001, now=100.1)  # an after-claim: cost not noted
    assert (position.key, position.full_cost) == ((3, 2, 12), 0.01)
    position.claimed([], full=True, cost=60.0, now=200.0)  # nothing claimed: the key stays
    assert position.key == (3, 2, 12)
    assert position.after(200.0 + RESCAN_MAX * 0.99) == (3, 2, 12)
    assert position.after(200.0 + RESCAN_MAX) is None


# ---------------------------------------------------------------------------- claims on PostgreSQL

class SlowClock:
    """Each reading 10 ms after the last: every claim looks costly (5x CHEAP), so claims start after the
    position until the gap (RESCAN_RATIO x 10 ms of readings) has passed; ``jump`` passes it at once."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += CHEAP * 5
        return self.now

    def jump(self) -> None:
        self.now += RESCAN_MAX


def _ids(claimed) -> list[int]:
    return [j.id for j in claimed]


@contextlib.contextmanager
def pinned(url: str) -> Iterator[psycopg.Connection]:
    """Another session idle in a transaction that holds its snapshot, until the block ends."""
    with psycopg.connect(url, autocommit=True) as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT 1").fetchall()
        try:
            yield pin
        finally:
            pin.execute("ROLLBACK")


@pytest.fixture
def costly(app, migrated_url) -> Iterator[SlowClock]:
    """Claims from the start look costly, and a snapshot is held (counted at once: ``held_for`` 0)."""
    clock = SlowClock()
    positions = app.store.dialect.claim_positions
    positions.clock, positions.held_for = clock, 0.0
    with pinned(migrated_url):
        yield clock


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_costly_claims_start_from_the_start_while_no_snapshot_is_held(app):
    """A busy machine makes claims slow too: without a long transaction that changes nothing."""
    app.store.dialect.claim_positions.clock = SlowClock()
    jobs = app.store.jobs
    first = jobs.enqueue([NewJob("x", "default", "{}") for _ in range(4)])
    assert _ids(jobs.claim("w", ["default"], 2, 30)) == first[:2]
    jobs.release("w", [first[0]])
    urgent = jobs.enqueue([NewJob("x", "default", "{}", priority=5)])[0]
    assert _ids(jobs.claim("w", ["default"], 2, 30)) == [urgent, first[0]]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_after_the_position_then_from_the_start_jobs_before_it_are_claimed_first(app, costly):
    clock = costly
    jobs = app.store.jobs
    first = jobs.enqueue([NewJob("x", "default", "{}") for _ in range(6)])
    assert _ids(jobs.claim("w", ["default"], 2, 30)) == first[:2]  # from the start: costly, so a position
    jobs.release("w", [first[0]])  # claimable again, before the position
    urgent = jobs.enqueue([NewJob("x", "default", "{}", priority=5)])[0]  # a higher priority
    assert _ids(jobs.claim("w", ["default"], 2, 30)) == first[2:4]  # after the position: neither seen yet
    clock.jump()
    assert _ids(jobs.claim("w", ["default"], 3, 30)) == [urgent, first[0], first[4]]  # from the start
    assert _ids(jobs.claim("w", ["default"], 5, 30)) == [first[5]]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_claims_after_the_position_keep_turns_and_ids_and_hand_no_job_twice(app, costly):
    jobs = app.store.jobs

    @app.job(name="work", fairness_key=lambda tenant: tenant)
    def work(tenant: str) -> None: ...

    ids = [work.enqueue(k).id for k in "aaabbc"]
    by_turn = [ids[0], ids[3], ids[5], ids[1], ids[4], ids[2]]  # a b c, a b, a
    got: list[int] = []
    owners = ["w1", "w2"]
    for n in range(6):  # two workers, each with its own position, take turns taking one job
        got += _ids(jobs.claim(owners[n % 2], ["default"], 1, 30))
    assert got == by_turn
    later = [work.enqueue("d").id]  # a new key starts at the highest turn handed out (a's 3rd)
    assert _ids(jobs.claim("w1", ["default"], 5, 30)) + _ids(jobs.claim("w2", ["default"], 5, 30)) == later


def _claim_scan(plan: dict[str, Any], index: str) -> dict[str, Any]:
    """The plan node that scans ``index`` (empty if none does)."""
    if plan.get("Index Name") == index:
        return plan
    for child in plan.get("Plans", []):
        found = _claim_scan(child, index)
        if found:
            return found
    return {}


def _buffers(cur: psycopg.Cursor, sql: str, params: tuple[Any, ...]) -> int:
    cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
    plan = cur.fetchone()[0][0]["Plan"]
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_under_a_pinned_snapshot_a_claim_after_the_position_reads_a_few_buffers(app, migrated_url):
    """3,000 jobs claimed and settled while another session holds a snapshot: their dead entries stay in
    the claim index.  From the start, the pick walks them (hundreds of buffers); after the position,
    the index seeks past them (a handful, as on an empty table)."""
    d, jobs = app.store.dialect, app.store.jobs
    with pinned(migrated_url), psycopg.connect(migrated_url) as probe:
        for _ in range(6):
            ids = jobs.enqueue([NewJob("x", "default", "{}") for _ in range(500)])
            while jobs.claim("w", ["default"], 100, 30):
                pass
            app.store.db.run(lambda cur, ids=ids: cur.execute(d.q("DELETE FROM {jobs} WHERE id = ANY(%s)"), (ids,)))
        waiting = jobs.enqueue([NewJob("x", "default", "{}") for _ in range(10)])
        last = (0, 0, waiting[0] - 1)
        with probe.cursor() as cur:
            from_start = _buffers(cur, *d.pick("default", 10))
            after = _buffers(cur, *d.pick("default", 10, after=last))
            cur.execute(*d.pick("default", 10, after=last))
            assert [r[0] for r in cur.fetchall()] == waiting
            sql, params = d.pick("default", 10, after=last)
            cur.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            plan = cur.fetchone()[0][0]["Plan"]
    assert "ROW(fair_turn, id) >" in _claim_scan(plan, d.t_jobs + "_claim").get("Index Cond", ""), json.dumps(plan)
    assert from_start > 40, from_start  # the hazard is real here: the dead entries are walked (about 70)
    assert after <= 12, (after, from_start)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_server_that_refuses_the_look_for_long_transactions_costs_no_claim(app, caplog):
    """The look is a hint: refused (here a catalogue column that does not exist), the claim still
    succeeds, from the start, and the look waits before it is tried again."""
    positions = app.store.dialect.claim_positions
    positions.oldest_sql = "SELECT no_such_column FROM pg_class WHERE %s = 1"
    jobs = app.store.jobs
    first = jobs.enqueue([NewJob("x", "default", "{}") for _ in range(4)])
    assert _ids(jobs.claim("w", ["default"], 2, 30)) == first[:2]
    assert "cannot look for long-open transactions" in caplog.text
    caplog.clear()
    assert _ids(jobs.claim("w", ["default"], 2, 30)) == first[2:]
    assert "cannot look" not in caplog.text  # asked again only after a pause


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_an_age_that_is_not_a_number_counts_as_no_long_transaction(app):
    positions = app.store.dialect.claim_positions
    positions.oldest_sql = "SELECT 1, 'x', NULL WHERE %s = 1"
    jobs = app.store.jobs
    first = jobs.enqueue([NewJob("x", "default", "{}") for _ in range(2)])
    assert _ids(jobs.claim("w", ["default"], 2, 30)) == first
    assert positions._held is False
