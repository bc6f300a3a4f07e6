"""Periodic jobs and running one now."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...services import operator as ops
from ..auth import Principal
from ..rendering import Dashboard


async def periodic_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """The app's schedules, their last and next runs."""
    return d.render(request, "periodic.html", user, schedules=await run_in_threadpool(ops.periodic_view, d.app))


async def periodic_run(d: Dashboard, request: Request, user: Principal) -> Response:
    """Enqueue a periodic job now, then show it."""
    job_id = await run_in_threadpool(ops.run_periodic_now, d.app, user.username, request.path_params["name"])
    return RedirectResponse(d.url(request, f"/jobs/{job_id}"), status_code=303)
