"""Queues (counts, pauses, limits) and pausing or resuming one."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...services import activity
from ...services import operator as ops
from .. import params
from ..auth import Principal
from ..rendering import Dashboard
from .charts import window_of

QUEUE_ACTIONS = ("pause", "resume")


async def queues_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """Every queue with its counts, pause, limits and throughput chart over a window."""
    window = window_of(request)
    charts = await run_in_threadpool(activity.queue_throughput, d.app, window)
    return d.render(request, "queues.html", user, queues=await run_in_threadpool(ops.queues_view, d.app),
                    charts=charts, window=window, windows=list(ops.WINDOWS))


async def queue_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Pause or resume a queue."""
    name, action = request.path_params["name"], request.path_params["action"]
    if action not in QUEUE_ACTIONS:
        raise HTTPException(404)
    name = params.checked_queue(name)
    await run_in_threadpool(ops.set_paused, d.app, user.username, name, action == "pause")
    return RedirectResponse(d.url(request, "/queues", done=f"{action}:{name}"), status_code=303)
