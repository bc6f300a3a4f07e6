"""Worker processes, their heartbeats and the jobs they hold."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ...services import activity
from ...services import operator as ops
from ..auth import Principal
from ..rendering import Dashboard


async def workers_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """The worker registry."""
    return d.render(request, "workers.html", user, workers=await run_in_threadpool(ops.workers_view, d.app),
                    activity=await run_in_threadpool(activity.worker_activity, d.app))
