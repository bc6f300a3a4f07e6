"""Workflows (and chains and batches) as operators see them: a workflow with each step, the
recent ones, the workflow a job belongs to, and cancelling one (audited).

The dashboard's page and API and ``errands workflow`` call these and nothing else; these call
the app and the store's verbs (``store.workflows``) and nothing else.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ..core.errors import JobNotFound
from ..core.limits import ID_MAX
from ..core.rows import BatchRow, StepRow
from .models import WorkflowCancelled, WorkflowLink, WorkflowList, WorkflowStep, WorkflowSummary, WorkflowView

if TYPE_CHECKING:
    from ..app import Errands

LIST_LIMIT = 50
"""Workflows per page of the list."""


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _checked(workflow_id: object) -> int:
    """A workflow id as any backend can look it up (1..ID_MAX), or JobNotFound."""
    if type(workflow_id) is not int or not 0 < workflow_id <= ID_MAX:
        raise JobNotFound(f"no workflow has the id {workflow_id!r}: ids are integers from 1 to {ID_MAX}")
    return workflow_id


def _missing(workflow_id: int) -> JobNotFound:
    return JobNotFound(f"no workflow, chain or batch has the id {workflow_id} (or it ended and was pruned)")


def step_layers(steps: Sequence[StepRow]) -> dict[int, int]:
    """Each step's column in the graph, by job id: the longest path to it from a step that waits
    for nothing (0 for those).  Parents outside ``steps`` are ignored; a step caught in a cycle
    (which no workflow can build) goes one column after every other."""
    ids = {s.job_id for s in steps}
    children: dict[int, list[int]] = {s.job_id: [] for s in steps}
    waiting: dict[int, int] = {}
    for s in steps:
        parents = {p for p in s.parents if p in ids and p != s.job_id}
        waiting[s.job_id] = len(parents)
        for p in parents:
            children[p].append(s.job_id)
    layer = dict.fromkeys(ids, 0)
    ready = deque(s.job_id for s in steps if waiting[s.job_id] == 0)
    placed = 0
    while ready:
        node = ready.popleft()
        placed += 1
        for child in children[node]:
            layer[child] = max(layer[child], layer[node] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if placed < len(ids):
        last = max((layer[i] for i in ids if waiting[i] == 0), default=-1) + 1
        for i in ids:
            if waiting[i] > 0:
                layer[i] = last
    return layer


def progress_text(state: str, total: int, done: int, failed: int, cancelled: int, percent: float) -> str:
    """How far a workflow got, in words: a percentage only while it runs (or when it succeeded); a
    workflow that cannot finish as it should says so (issue 26: a blocked one read "75.0%", as if it
    were three quarters through), with its steps counted: succeeded, failed, cancelled, waiting."""
    waiting = max(total - done - failed - cancelled, 0)
    counts = [f"{done:,} of {total:,} step{'s' if total != 1 else ''} succeeded"]
    counts += [f"{n:,} {what}" for n, what in ((failed, "failed"), (cancelled, "cancelled"), (waiting, "waiting"))
               if n]
    head = f"{percent:g}%" if state in ("running", "succeeded") else state
    return f"{head}: {', '.join(counts)}"


def _summary_fields(batch: BatchRow, state: str, cancelled: int) -> dict[str, object]:
    failed = max(batch.failed - cancelled, 0)
    return {"id": batch.id, "kind": batch.kind, "name": batch.name, "policy": batch.policy, "state": state,
            "total": batch.total, "done": batch.done, "failed": failed, "cancelled": cancelled,
            "pending": batch.pending, "percent": batch.percent,
            "progress": progress_text(state, batch.total, batch.done, failed, cancelled, batch.percent),
            "created_at": _iso(batch.created_at), "completed_at": _iso(batch.completed_at)}


def workflow_view(app: Errands, workflow_id: int) -> WorkflowView:
    """A workflow (chain, batch) with its progress and every step: state, parents, error and its
    column in the graph.  JobNotFound when there is none with that id."""
    row = app.workflows.status(_checked(workflow_id))
    if row is None:
        raise _missing(workflow_id)
    layers = step_layers(row.steps)
    steps = [WorkflowStep(s.job_id, s.position, s.label, s.state.value, list(s.parents), layers[s.job_id], s.error)
             for s in row.steps]
    return WorkflowView(**_summary_fields(row.batch, row.state, row.cancelled), steps=steps)  # type: ignore[arg-type]


def _counted_state(batch: BatchRow, with_dead: set[int], stuck: set[int]) -> str:
    """A list's state, from the counters: an unfinished one with failures "blocked" when no step of
    it can run (``stuck``); a finished one with failures "failed" when a step is in the dead letter,
    else "cancelled" (as the workflow's own page says)."""
    if not batch.finished:
        return "blocked" if batch.id in stuck else "running"
    if batch.failed == 0:
        return "succeeded"
    return "failed" if batch.id in with_dead else "cancelled"


def recent_workflows(app: Errands, before_id: int | None = None, limit: int = LIST_LIMIT) -> WorkflowList:
    """Batches, chains and workflows, newest first: a keyset page below ``before_id``.  Only those
    with failures cost more reads (which steps are dead, cancelled, or hold the rest)."""
    if before_id is not None:
        _checked(before_id)
    store = app.reads.workflows  # a list to look at: the read replica's when there is one
    rows = store.recent(limit, before_id)
    failing = [b for b in rows if b.failed]
    with_dead = store.with_dead_steps([b.id for b in failing if b.finished])
    stuck = store.stuck([b.id for b in failing if not b.finished])
    cancelled = store.cancelled_steps([b.id for b in failing])
    return WorkflowList([WorkflowSummary(**_summary_fields(b, _counted_state(b, with_dead, stuck),  # type: ignore[arg-type]
                                                           cancelled.get(b.id, 0)))
                         for b in rows], rows[-1].id if len(rows) == limit else None)


def workflow_of(app: Errands, job_id: int, batch_id: int | None = None) -> WorkflowLink | None:
    """The batch, chain or workflow job ``job_id`` belongs to (``batch_id`` when the caller read
    it already), or None."""
    store = app.store
    batch = store.workflows.batch_of(job_id) if batch_id is None else store.features.get_batch(batch_id)
    return None if batch is None else WorkflowLink(batch.id, batch.kind, batch.name)


def cancel_workflow(app: Errands, actor: str, workflow_id: int) -> WorkflowCancelled:
    """Cancel every step of a workflow (chain, batch) that has not started; running steps finish.
    Audited, whatever the count; JobNotFound when there is no such workflow."""
    if app.batch_status(_checked(workflow_id)) is None:
        raise _missing(workflow_id)
    cancelled = app.workflows.cancel(workflow_id)
    app.store.accounts.audit(actor, "cancel", f"workflow {workflow_id}", f"{cancelled} step(s) cancelled")
    return WorkflowCancelled(workflow_id, cancelled)


__all__ = ["LIST_LIMIT", "cancel_workflow", "progress_text", "recent_workflows", "step_layers", "workflow_of",
           "workflow_view"]
