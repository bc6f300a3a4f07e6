"""Jobs waiting or running, stale jobs, one job; cancelling one and recovering stale ones."""

from __future__ import annotations

from functools import partial

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...core.errors import JobNotFound
from ...services import operator as ops
from ...services.models import JobPage
from .. import params
from ..auth import Principal
from ..rendering import Dashboard, Drawn


async def jobs_page(d: Dashboard, request: Request, user: Principal, stale: bool = False) -> Response:
    """One keyset page of jobs, filtered and sorted as the query says."""
    query = request.query_params
    flt = params.job_filter(query)
    if stale:
        flt.state = "stale"
    before, after, sort = params.query_int(request, "before"), params.query_int(request, "after"), params.sort(query)
    key = ("jobs", tuple(sorted(flt.args().items())), before, after, sort)
    entry = await d.read_model(request, key, partial(ops.list_jobs, d.app, flt, before, params.PAGE_SIZE, sort, after))
    root = request.scope.get("root_path", "")
    rows = entry.fragment(f"rows:{root}", partial(_rows, d, root))
    return d.render(request, "jobs.html", user, data=entry.value, flt=flt, stale=stale, states=ops.STATES,
                    sorts=ops.SORTS, queues=d.app.default_queues(), rows=rows)


def _rows(d: Dashboard, root: str, data: JobPage) -> Drawn:
    """The table's rows, the same for everyone: drawn once per cached page of jobs."""
    return Drawn(d.env.get_template("job_rows.html").render(data=data, root=root))


async def stale_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """Jobs whose worker stopped heart-beating."""
    return await jobs_page(d, request, user, stale=True)


async def job_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """One job wherever it is, with why it waits."""
    try:
        job = await run_in_threadpool(ops.job_detail, d.app, params.job_id(request),
                                      tracebacks=d.shows_tracebacks(user))
    except JobNotFound as exc:
        return d.render(request, "error.html", user, status=404, message=str(exc))
    return d.render(request, "job.html", user, job=job)


async def cancel_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Cancel a job, then show it."""
    job_id = params.job_id(request)
    await run_in_threadpool(ops.cancel_job, d.app, user.username, job_id)
    return RedirectResponse(d.url(request, f"/jobs/{job_id}"), status_code=303)


async def recover_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Release stale jobs now, then say how many."""
    report = await run_in_threadpool(ops.recover_now, d.app, user.username)
    return RedirectResponse(d.url(request, "/stale", done=f"recovered:{len(report.released)}:"
                                                          f"{len(report.buried)}"), status_code=303)
