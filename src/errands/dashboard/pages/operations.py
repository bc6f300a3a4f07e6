"""Operator tools: going to a job by its id, and bulk actions on the waiting jobs a filter matches
(count first, then confirm)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...core.errors import InvalidOption
from ...services import limits as qlimits
from ...services import operations as opx
from .. import params
from ..auth import Principal
from ..rendering import Dashboard


async def find_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """``/find?id=123``: straight to the job's page wherever it is; a clear page when the text is
    no id (400) or no table holds that id (404)."""
    typed = request.query_params.get("id")
    if typed is None:
        return d.render(request, "find.html", user, message="", typed="")
    try:
        found = await run_in_threadpool(opx.find_job, d.app, typed)
    except InvalidOption as exc:
        return d.render(request, "find.html", user, status=400, message=str(exc), typed=typed[:60])
    if found is None:
        return d.render(request, "find.html", user, status=404, typed=typed[:60],
                        message=opx.not_found_text(opx.parse_job_id(typed)))
    return RedirectResponse(d.url(request, found.url), status_code=303)


async def bulk_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Cancel, move or re-prioritise the waiting jobs the jobs page's filter matches: the first post
    shows how many on a confirmation page; the confirmed one acts and says how many it changed."""
    form = await request.form()
    flt = params.job_filter(form)
    back = d.url(request, "/jobs", queue=flt.queue, state=flt.state, name=flt.name, q=flt.text)
    try:
        action, queue, priority = opx.bulk_target(form.get("action"), form.get("to_queue"), form.get("priority"))
        opx.bulk_filter(flt)
    except InvalidOption as exc:
        return d.render(request, "error.html", user, status=400, message=str(exc))
    confirmed = params.integer(form.get("confirm"), "confirm", 0)
    upto = params.integer(form.get("upto"), "upto", 0)
    since = params.integer(form.get("since"), "since", 0) or 0
    if confirmed is None or upto is None:
        plan = await run_in_threadpool(opx.plan_bulk, d.app, action, flt, queue, priority)
        return d.render(request, "bulk_confirm.html", user, plan=plan, flt=flt, back=back,
                        bulk_cap=opx.BULK_JOBS_CAP)
    done = await run_in_threadpool(opx.run_bulk, d.app, user.username, action, flt, upto, confirmed,
                                   since=since, queue=queue, priority=priority)
    return RedirectResponse(d.url(request, "/jobs", queue=flt.queue, state=flt.state, name=flt.name, q=flt.text,
                                  done=f"{opx.ACTION_WORDS[action]} {done.done:,} of {done.counted:,} "
                                       f"confirmed waiting job(s)"), status_code=303)


async def queue_limits_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Set a queue's limits (concurrency, rate) from the queues page; workers apply them within seconds."""
    form = await request.form()
    name = params.checked_queue(request.path_params["name"])
    try:
        limits = qlimits.parse_limits(form.get("concurrency"), form.get("rate"))
    except InvalidOption as exc:
        return d.render(request, "error.html", user, status=400, message=str(exc))
    done = await run_in_threadpool(qlimits.set_queue_limits, d.app, user.username, name, limits)
    return RedirectResponse(d.url(request, "/queues", done=f"limits of {name}: {done.text}"), status_code=303)
