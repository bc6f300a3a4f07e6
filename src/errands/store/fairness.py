"""Fairness between keys: the turn each keyed job gets at enqueue, and forgetting idle keys.

A job with a ``fairness_key`` (a tenant, a customer...) gets a **turn** when it is enqueued: the
first job of a key in a queue gets turn 1, its second turn 2, and so on, counted in a counter row
per (queue, key) (``errands_fair_keys``).  The claim orders by priority, then turn, then id (the
claim index has ``fair_turn`` after ``priority``), so waiting keys take turns: every key's 1st job,
then every key's 2nd, whatever the order they were enqueued in.  A job without a key has turn 0
and keeps today's order and cost: it goes before the keyed jobs of its priority.

The counter is read and written under its row's lock, in the transaction that inserts the jobs,
so two enqueuers of one key never get the same turn (keys are locked in one order: no deadlock
between two enqueuers).  A key that was idle must neither jump ahead nor wait behind everyone:
its next turn is at least the **floor** of its queue, the lowest turn of a keyed job of that
priority that is ready now (the turn the claim is serving), or, when none waits, the highest turn
the queue has handed out.  So a tenant back after a day starts level with the tenants being
served now, not 10,000 turns ahead of them, and a key that enqueues a burst takes its turns
after the ones it already holds.

The maintenance pass forgets counters idle for :data:`IDLE_SECONDS` (at most :data:`PRUNE_BATCH`
a pass), keeping each queue's highest: a forgotten key starts at the floor, as a new one does.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.rows import NewJob, as_int
from .dialects.base import Dialect
from .driver import Cursor, fetch_rows, scalar

IDLE_SECONDS = 86400.0
"""A key's counter is forgotten once the key has enqueued nothing for this long (a day)."""
PRUNE_BATCH = 1000
"""Most counters one maintenance pass forgets."""
SERVING = ("SELECT fair_turn FROM {jobs} WHERE queue = {p} AND priority = {p} AND reserved_by IS NULL "
           "AND blocked_by IS NULL AND fair_turn > 0 AND available_at <= {now} ORDER BY fair_turn LIMIT 1")
"""The turn the claim is serving in a queue at a priority (params: queue, priority): the claim index's
first keyed entry there (a test holds its plan to the index)."""


def assign_turns(d: Dialect, cur: Cursor, jobs: Sequence[NewJob]) -> Sequence[NewJob]:
    """``jobs`` with each keyed job's ``fair_turn`` set (the others as they are), counted under the
    keys' row locks inside the caller's write transaction.  The jobs of one (queue, key) of this
    enqueue take consecutive turns, in their order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, j in enumerate(jobs):
        if j.fairness_key is not None:
            groups.setdefault((j.queue, j.fairness_key), []).append(i)
    if not groups:
        return jobs
    out = list(jobs)
    for queue, key in sorted(groups):  # one locking order for every enqueuer
        positions = groups[queue, key]
        cur.execute(d.q(d.fair_touch_sql), (queue, key))  # creates or locks the counter row
        cur.execute(d.q("SELECT turn FROM {fair_keys} WHERE queue = {p} AND name = {p}"), (queue, key))
        counter = as_int(scalar(cur))
        first = max(counter + 1, floor(d, cur, queue, jobs[positions[0]].priority))
        cur.execute(d.q("UPDATE {fair_keys} SET turn = {p} WHERE queue = {p} AND name = {p}"),
                    (first + len(positions) - 1, queue, key))
        for n, i in enumerate(positions):
            out[i] = out[i]._replace(fair_turn=first + n)
    return out


def floor(d: Dialect, cur: Cursor, queue: str, priority: int) -> int:
    """The lowest turn a key may take next in ``queue`` at ``priority``: the turn of the first keyed
    job the claim would take (one probe of the claim index), else the queue's highest turn handed
    out (one probe of the counters' (queue, turn) index), else 0."""
    cur.execute(d.q(SERVING), (queue, int(priority)))
    serving = scalar(cur)
    if serving is not None:
        return as_int(serving)
    cur.execute(d.q("SELECT MAX(turn) FROM {fair_keys} WHERE queue = {p}"), (queue,))
    return as_int(scalar(cur))


def prune(d: Dialect, cur: Cursor, idle: float = IDLE_SECONDS, limit: int = PRUNE_BATCH) -> int:
    """Forget at most ``limit`` counters of keys idle for ``idle`` seconds; each queue's highest stays
    (it is the floor of a queue where no keyed job waits).  Returns how many were forgotten."""
    cur.execute(d.q("SELECT queue, name FROM {fair_keys} f WHERE used_at < {now_plus} AND turn < "
                    "(SELECT MAX(turn) FROM {fair_keys} g WHERE g.queue = f.queue) LIMIT {p}"),
                (-float(idle), int(limit)))
    idle_keys = [(r["queue"], r["name"]) for r in fetch_rows(cur)]
    if idle_keys:
        cur.executemany(d.q("DELETE FROM {fair_keys} WHERE queue = {p} AND name = {p} AND used_at < {now_plus}"),
                        [(queue, name, -float(idle)) for queue, name in idle_keys])
    return len(idle_keys)
