"""The enqueue form: a registered job, its arguments as JSON, a queue, a delay, copies."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...core.errors import EnqueueError
from ...core.payload import parse_json
from ...services import operator as ops
from .. import params
from ..auth import Principal
from ..rendering import Dashboard

FIELDS = ("job", "args", "kwargs", "queue", "delay", "copies")


async def enqueue_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """The form, with the registered jobs and their parameters."""
    return d.render(request, "enqueue.html", user, jobs=await run_in_threadpool(ops.enqueue_form, d.app),
                    cap=ops.ENQUEUE_CAP, selected=request.query_params.get("job", ""))


def _copies(text: str) -> int:
    """The form's copies: a whole number from 1 to the cap (ValueError otherwise)."""
    if not params.INTEGER.fullmatch(text.strip() or "1") or not 1 <= int(text or 1) <= ops.ENQUEUE_CAP:
        raise ValueError(f"copies must be a whole number from 1 to {ops.ENQUEUE_CAP}")
    return int(text or 1)


async def enqueue_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Enqueue what the form says; on a refusal, the form again with the values and the reason."""
    form = await request.form()
    values = {k: str(form.get(k, "")) for k in FIELDS}
    try:
        args = parse_json(values["args"] or "[]", "arguments")
        kwargs = parse_json(values["kwargs"] or "{}", "keyword arguments")
        delay = params.delay_field(values["delay"])
        copies = _copies(values["copies"])
        ids = await run_in_threadpool(ops.enqueue, d.app, user.username, values["job"], args, kwargs,
                                      queue=values["queue"] or None, delay=delay, copies=copies)
    except (ValueError, EnqueueError) as exc:
        jobs = await run_in_threadpool(ops.enqueue_form, d.app)
        return d.render(request, "enqueue.html", user, status=400, jobs=jobs,
                        cap=ops.ENQUEUE_CAP, selected=values["job"], error=str(exc), values=values)
    target = f"/jobs/{ids[0]}" if len(ids) == 1 else "/jobs"
    return RedirectResponse(d.url(request, target, done=f"enqueued:{len(ids)}"), status_code=303)
