"""Workflows, chains and batches: the recent ones, one drawn as a graph with its steps, and
cancelling one (two steps: what it will do, then confirm)."""

from __future__ import annotations

from collections import Counter

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...core.errors import JobNotFound
from ...core.rows import JobState
from ...services import workflows as flows
from ...services.models import WorkflowView
from .. import params
from ..auth import Principal
from ..graph import AGGREGATE_ABOVE, Graph, counts_text, layout
from ..rendering import Dashboard

STEPS_PAGE = 100
"""Rows of the steps table per page."""
NOT_STARTED = (JobState.READY.value, JobState.DELAYED.value, JobState.BLOCKED.value)
"""The steps a cancel ends (running and stale ones finish)."""
STEP_STATES = tuple(s.value for s in JobState if s is not JobState.UNKNOWN)


async def workflows_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """Recent batches, chains and workflows with their state and progress (newest first)."""
    data = await run_in_threadpool(flows.recent_workflows, d.app, params.query_int(request, "before"))
    return d.render(request, "workflows.html", user, data=data)


def _drawn(d: Dashboard, workflow_id: int) -> tuple[WorkflowView, Graph]:
    """The workflow and its layout (in a worker thread: a graph of many steps takes a while)."""
    view = flows.workflow_view(d.app, workflow_id)
    return view, layout(view.steps)


async def workflow_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """One workflow: its graph, progress and state, a page of its steps, and Cancel for admins."""
    workflow_id = params.workflow_id(request)
    query = request.query_params
    layer = params.integer(query.get("layer"), "layer", 0, 1_000_000)
    state = query.get("state") or None
    if state is not None and state not in STEP_STATES:
        raise HTTPException(400, f"state must be one of {', '.join(STEP_STATES)}")
    page = params.integer(query.get("page"), "page", 1, 1_000_000) or 1
    try:
        view, graph = await run_in_threadpool(_drawn, d, workflow_id)
    except JobNotFound as exc:
        return d.render(request, "error.html", user, status=404, message=str(exc))
    shown = [s for s in view.steps if (layer is None or s.layer == layer) and (state is None or s.state == state)]
    pages = max(1, -(-len(shown) // STEPS_PAGE))
    page = min(page, pages)
    states = Counter(s.state for s in view.steps)
    return d.render(request, "workflow.html", user, wf=view, graph=graph, steps=shown[(page - 1) * STEPS_PAGE:
                                                                                    page * STEPS_PAGE],
                    matching=len(shown), page=page, pages=pages, layer=layer, state=state,
                    states=[(s, states[s]) for s in STEP_STATES if states.get(s)], counts=counts_text(states),
                    cancellable=sum(states.get(s, 0) for s in NOT_STARTED), aggregate_above=AGGREGATE_ABOVE)


async def cancel_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Cancel what has not started: first say what that is, act once ``confirm=1`` comes back."""
    workflow_id = params.workflow_id(request)
    form = await request.form()
    if form.get("confirm") != "1":
        try:
            view = await run_in_threadpool(flows.workflow_view, d.app, workflow_id)
        except JobNotFound as exc:
            return d.render(request, "error.html", user, status=404, message=str(exc))
        waiting = sum(1 for s in view.steps if s.state in NOT_STARTED)
        running = sum(1 for s in view.steps if s.state in (JobState.RUNNING.value, JobState.STALE.value))
        return d.render(request, "workflow_confirm.html", user, wf=view, waiting=waiting, running=running)
    try:
        done = await run_in_threadpool(flows.cancel_workflow, d.app, user.username, workflow_id)
    except JobNotFound as exc:
        return d.render(request, "error.html", user, status=404, message=str(exc))
    return RedirectResponse(d.url(request, f"/workflows/{workflow_id}", done=f"cancelled:{done.cancelled}"),
                            status_code=303)
