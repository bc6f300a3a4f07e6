"""Worker processes, their heartbeats and the jobs they hold; quieting, resuming and stopping them."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...services import activity
from ...services import operator as ops
from ...services import workers as fleet
from ..auth import Principal
from ..rendering import Dashboard


async def workers_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """The worker registry."""
    return d.render(request, "workers.html", user, workers=await run_in_threadpool(ops.workers_view, d.app),
                    activity=await run_in_threadpool(activity.worker_activity, d.app))


async def worker_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Quiet, resume or stop one worker process (form field ``worker``) or every one of a host (``host``)."""
    action = request.path_params["action"]
    if action not in fleet.ACTIONS:
        raise HTTPException(404)
    form = await request.form()
    worker_id, host = form.get("worker"), form.get("host")
    if isinstance(worker_id, str) and worker_id:
        done = await run_in_threadpool(fleet.command_worker, d.app, user.username, action, worker_id)
    elif isinstance(host, str) and host:
        done = await run_in_threadpool(fleet.command_host, d.app, user.username, action, host)
    else:
        raise HTTPException(400, "name a worker or a host")
    return RedirectResponse(d.url(request, "/workers", done=f"{action}:{','.join(done.workers)}"), status_code=303)
