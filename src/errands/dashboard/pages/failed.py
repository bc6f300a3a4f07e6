"""The dead letter, and retrying or forgetting its entries (two steps: count, then confirm)."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...services import operator as ops
from .. import params
from ..auth import Principal
from ..rendering import Dashboard

DEAD_ACTIONS = ("retry", "forget")


async def dead_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """One keyset page of the dead letter, with its groups."""
    flt = params.job_filter(request.query_params)
    data = await run_in_threadpool(ops.dead_letter, d.app, flt, params.query_int(request, "before"), params.PAGE_SIZE)
    return d.render(request, "dead.html", user, data=data, flt=flt)


async def _selected(d: Dashboard, form: Any, flt: ops.JobFilter) -> list[int]:
    """The entries a form names: the ticked ids (none if one is no id), or every match of its filter."""
    given = [params.integer(i, "id") for i in form.getlist("id")]
    ids = [i for i in given if i is not None]
    if form.get("scope") == "all":
        return (await run_in_threadpool(ops.matching_failed, d.app, flt))[:params.BULK_CAP]
    return ids if len(ids) == len(given) else []


async def dead_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Retry or forget entries: say how many first; act only when the same count comes back."""
    form = await request.form()
    action = request.path_params["action"]
    if action not in DEAD_ACTIONS:
        raise HTTPException(404)
    flt = params.job_filter(form)
    ids = await _selected(d, form, flt)
    if not ids:
        return d.render(request, "error.html", user, status=400, message="nothing selected")
    confirmed = params.integer(form.get("confirm"), "confirm", 0)
    if confirmed != len(ids):
        return d.render(request, "confirm.html", user, action=action, ids=ids, count=len(ids), flt=flt,
                        scope=form.get("scope", ""))
    done = await run_in_threadpool(ops.retry_failed if action == "retry" else ops.forget_failed, d.app,
                                   user.username, ids)
    back = d.url(request, "/dead", queue=flt.queue, name=flt.name, q=flt.text, done=f"{action}:{done}")
    return RedirectResponse(back, status_code=303)
