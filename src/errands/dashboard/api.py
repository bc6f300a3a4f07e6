"""The JSON API: the same service functions as the pages, answering with the same read models
(serialised by :meth:`ReadModel.to_json`).  ``ENDPOINTS`` lists every operation with the model it
answers with; the OpenAPI document (:mod:`.openapi`) is generated from that list."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..core.errors import EnqueueError, JobNotFound, StoreUnavailable
from ..core.limits import ID_MAX, INT_MAX, MAX_DELAY
from ..core.payload import MAX_DEPTH, safe_text, too_deep
from ..services import accounts, activity
from ..services import alerts as alerting
from ..services import limits as qlimits
from ..services import operations as opx
from ..services import operator as ops
from ..services import schedules as sched
from ..services import workers as fleet
from ..services import workflows as flows
from ..services.models import (
    AlertList,
    AuditLog,
    BulkDone,
    BulkJobsDone,
    BulkPlan,
    Cancelled,
    DeadLetterPage,
    EnqueuedJobs,
    EnqueueForm,
    FoundJob,
    JobDetail,
    JobPage,
    Me,
    NeedsConfirmation,
    Overview,
    PeriodicRun,
    QueueLimitsView,
    QueueList,
    QueueToggled,
    ReadModel,
    Recovered,
    ScheduleDeleted,
    ScheduleList,
    ScheduleView,
    UserList,
    WorkerActivity,
    WorkerList,
    WorkersCommanded,
    WorkflowCancelled,
    WorkflowList,
    WorkflowView,
)
from . import params
from .auth import Principal
from .readcache import LIVE_HEADER
from .rendering import Dashboard, Handler, JSONResponse

BODY_DEPTH = MAX_DEPTH + 2
"""Nesting levels a JSON API body may use: the body object, the args list (or kwargs object) and a
job's arguments' own MAX_DEPTH levels (what ``payload.encode_payload`` accepts)."""
MAX_LIMIT = 500

ApiCall = Callable[[Dashboard, Request, Principal, dict[str, Any]], ReadModel]
"""An API operation: runs in a worker thread (the store blocks) and answers with a read model."""


async def _body(request: Request) -> dict[str, Any] | Response:
    """A POST's JSON object, or the 400 that refuses it (too deep, not JSON, not an object)."""
    try:
        text = (await request.body()).decode("utf-8") or "{}"
        if too_deep(text, BODY_DEPTH):  # before the decoder, which recurses
            return JSONResponse({"error": f"the body nests lists and objects more than {BODY_DEPTH} "
                                          f"levels deep (a job's arguments may nest {MAX_DEPTH})"}, status_code=400)
        body = json.loads(text)
    except (ValueError, RecursionError):
        return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
    return body


def api(fn: ApiCall) -> Handler:
    """``fn`` as a handler: the body read, the call in a worker thread, refusals as JSON errors."""
    async def handler(d: Dashboard, request: Request, user: Principal) -> Response:
        body: dict[str, Any] = {}
        if request.method == "POST":
            read = await _body(request)
            if isinstance(read, Response):
                return read
            body = read
        try:
            shared = SHARED_MODELS.get(fn) if request.headers.get(LIVE_HEADER) else None
            if shared is not None:  # an open page's refresh: the model everyone shares (readcache.py)
                key, load = shared(d, request)
                result = (await d.read_model(request, key, load)).value
            else:
                result = await run_in_threadpool(fn, d, request, user, body)
        except HTTPException as exc:
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
        except JobNotFound as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        except (EnqueueError, ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(result.to_json())

    return handler


def _limit(request: Request) -> int:
    return min(params.integer(request.query_params.get("limit"), "limit", 1, INT_MAX) or params.PAGE_SIZE, MAX_LIMIT)


# ---------------------------------------------------------------------------------- reads
def api_me(d: Dashboard, request: Request, user: Principal, body: Any) -> Me:
    return Me(user.username, user.role, user.theme, user.csrf)


def api_overview(d: Dashboard, request: Request, user: Principal, body: Any) -> Overview:
    return overview_model(d, request)[1]()


def overview_model(d: Dashboard, request: Request) -> tuple[Hashable, Callable[[], Overview]]:
    """The overview's cache key and load: ``/api/overview``, which every open overview asks for every
    two seconds, shares the model of the page ``/`` (an unknown window is refused here)."""
    window = request.query_params.get("window", "1h")
    if window not in ops.WINDOWS:
        raise HTTPException(400, f"window must be one of {', '.join(ops.WINDOWS)}")
    return ("overview", window), partial(ops.overview, d.app, window)  # the key pages/overview.py uses


SHARED_MODELS: dict[Any, Callable[[Dashboard, Request], tuple[Hashable, Callable[[], Any]]]] = {
    api_overview: overview_model}
"""API reads the dashboard's own pages make as they refresh (:data:`LIVE_HEADER`), answered from the
shared read models (:mod:`.readcache`): the call's key and load.  Other clients read afresh: a program
that changes something and reads at once sees its change."""


def api_jobs(d: Dashboard, request: Request, user: Principal, body: Any) -> JobPage:
    query = request.query_params
    return ops.list_jobs(d.app, params.job_filter(query), params.query_int(request, "before"), _limit(request),
                         params.sort(query), params.query_int(request, "after"))


def api_job(d: Dashboard, request: Request, user: Principal, body: Any) -> JobDetail:
    return ops.job_detail(d.app, params.job_id(request), tracebacks=d.shows_tracebacks(user))


def api_dead(d: Dashboard, request: Request, user: Principal, body: Any) -> DeadLetterPage:
    return ops.dead_letter(d.app, params.job_filter(request.query_params), params.query_int(request, "before"),
                           _limit(request))


def api_workers(d: Dashboard, request: Request, user: Principal, body: Any) -> WorkerList:
    return WorkerList(ops.workers_view(d.app))


def api_activity(d: Dashboard, request: Request, user: Principal, body: Any) -> WorkerActivity:
    return activity.worker_activity(d.app)


def api_queues(d: Dashboard, request: Request, user: Principal, body: Any) -> QueueList:
    return QueueList(ops.queues_view(d.app))


def api_periodic(d: Dashboard, request: Request, user: Principal, body: Any) -> ScheduleList:
    return ScheduleList(ops.periodic_view(d.app))


def api_jobs_form(d: Dashboard, request: Request, user: Principal, body: Any) -> EnqueueForm:
    return EnqueueForm(ops.enqueue_form(d.app))


def api_audit(d: Dashboard, request: Request, user: Principal, body: Any) -> AuditLog:
    return AuditLog(ops.audit_view(d.app, params.query_int(request, "before")))


def api_users(d: Dashboard, request: Request, user: Principal, body: Any) -> UserList:
    if not user.is_admin:
        raise HTTPException(403, "this needs the admin role")
    search = request.query_params.get("q")
    if search is not None and len(search) > 100:
        raise HTTPException(400, "q is at most 100 characters")
    search = None if search is None else safe_text(search)
    return UserList(accounts.list_users(d.app, search or None) if d.auth.own_logins else [])


def api_alerts(d: Dashboard, request: Request, user: Principal, body: Any) -> AlertList:
    return alerting.alert_list(d.app)


def api_workflows(d: Dashboard, request: Request, user: Principal, body: Any) -> WorkflowList:
    return flows.recent_workflows(d.app, params.query_int(request, "before"), _limit(request))


def api_workflow(d: Dashboard, request: Request, user: Principal, body: Any) -> WorkflowView:
    return flows.workflow_view(d.app, params.workflow_id(request))


# ---------------------------------------------------------------------------------- actions
def api_cancel_workflow(d: Dashboard, request: Request, user: Principal, body: Any) -> WorkflowCancelled:
    return flows.cancel_workflow(d.app, user.username, params.workflow_id(request))


def api_dead_action(d: Dashboard, request: Request, user: Principal, body: dict[str, Any]
                    ) -> BulkDone | NeedsConfirmation:
    action = request.path_params["action"]
    if action not in ("retry", "forget"):
        raise HTTPException(404, "no such action")
    ids = params.bulk_ids(body, lambda flt: ops.matching_failed(d.app, flt))
    confirm = body.get("confirm")
    if confirm is not None and (type(confirm) is not int or not 0 <= confirm <= ID_MAX):
        raise HTTPException(400, "confirm must be the count the previous call reported (an integer)")
    if confirm != len(ids):
        return NeedsConfirmation(True, len(ids), f"send confirm={len(ids)} to {action} {len(ids)} entries")
    return BulkDone((ops.retry_failed if action == "retry" else ops.forget_failed)(d.app, user.username, ids))


def api_recover(d: Dashboard, request: Request, user: Principal, body: Any) -> Recovered:
    return ops.recover_now(d.app, user.username)


def api_queue_action(d: Dashboard, request: Request, user: Principal, body: Any) -> QueueToggled:
    action = request.path_params["action"]
    if action not in ("pause", "resume"):
        raise HTTPException(404, "no such action")
    name = params.checked_queue(request.path_params["name"])
    ops.set_paused(d.app, user.username, name, action == "pause")
    return QueueToggled(name, action == "pause")


def api_worker_action(d: Dashboard, request: Request, user: Principal, body: dict[str, Any]) -> WorkersCommanded:
    """Quiet, resume or stop one worker process (``{"worker": "<id>"}``) or every one registered on a host
    (``{"host": "<name>"}``); each reads its command with its next heartbeat."""
    action = request.path_params["action"]
    if action not in fleet.ACTIONS:
        raise HTTPException(404, "no such action")
    worker_id, host = body.get("worker"), body.get("host")
    if (worker_id is None) == (host is None) or not isinstance(worker_id or host, str):
        raise HTTPException(400, "give either worker (a worker's id, GET /api/workers) or host (a host name)")
    try:
        if isinstance(worker_id, str):
            return fleet.command_worker(d.app, user.username, action, worker_id)
        return fleet.command_host(d.app, user.username, action, str(host))
    except fleet.WorkerNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except fleet.CommandRefused as exc:
        raise HTTPException(409, str(exc)) from None


def api_queue_limits(d: Dashboard, request: Request, user: Principal, body: dict[str, Any]) -> QueueLimitsView:
    """Set a queue's stored limits: ``{"concurrency": 2, "rate": "10/minute"}`` (null or absent: none)."""
    name = params.checked_queue(request.path_params["name"])
    return qlimits.set_queue_limits(d.app, user.username, name,
                                    qlimits.parse_limits(body.get("concurrency"), body.get("rate")))


def api_periodic_run(d: Dashboard, request: Request, user: Principal, body: Any) -> PeriodicRun:
    return PeriodicRun(ops.run_periodic_now(d.app, user.username, request.path_params["name"]))


def api_schedule_add(d: Dashboard, request: Request, user: Principal, body: dict[str, Any]) -> ScheduleView:
    """Store a schedule: ``{"name": ..., "job": ..., "cron": ...}`` and any of timezone, args, kwargs,
    queue, priority, catch_up, catch_up_limit."""
    values = {k: v for k, v in body.items() if k not in ("name", "job", "cron")}
    required = [v for v in (body.get(k) for k in ("name", "job", "cron")) if isinstance(v, str)]
    if len(required) != 3:
        raise HTTPException(400, "name, job and cron are required strings")
    return sched.add_schedule(d.app, user.username, *required, **values)


def api_schedule_edit(d: Dashboard, request: Request, user: Principal, body: dict[str, Any]) -> ScheduleView:
    """Change a stored schedule in place: the settings the body gives (the others stay)."""
    return sched.edit_schedule(d.app, user.username, request.path_params["name"], **body)


def api_schedule_toggle(d: Dashboard, request: Request, user: Principal, body: Any) -> ScheduleView:
    action = request.path_params["action"]
    if action not in ("pause", "resume"):
        raise HTTPException(404, "no such action")
    return sched.set_schedule_paused(d.app, user.username, request.path_params["name"], action == "pause")


def api_schedule_delete(d: Dashboard, request: Request, user: Principal, body: Any) -> ScheduleDeleted:
    name = request.path_params["name"]
    return ScheduleDeleted(name, sched.delete_schedule(d.app, user.username, name))


def api_cancel(d: Dashboard, request: Request, user: Principal, body: Any) -> Cancelled:
    return Cancelled(ops.cancel_job(d.app, user.username, params.job_id(request)))


def api_enqueue(d: Dashboard, request: Request, user: Principal, body: dict[str, Any]) -> EnqueuedJobs:
    delay = body.get("delay")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float))
                              or not 0 <= delay <= MAX_DELAY):  # NaN and the infinities fail this too
        raise HTTPException(400, f"delay must be a number of seconds from 0 to {MAX_DELAY:.0f} (ten years)")
    queue = body.get("queue")
    if queue is not None and not isinstance(queue, str):
        raise HTTPException(400, "queue must be a string")
    name = body.get("job")
    if not isinstance(name, str):
        raise HTTPException(400, "job must be the name of a registered job")
    return EnqueuedJobs(ops.enqueue(d.app, user.username, name, body.get("args", []), body.get("kwargs", {}),
                                queue=queue, delay=delay, copies=body.get("copies", 1)))


def api_find(d: Dashboard, request: Request, user: Principal, body: Any) -> FoundJob:
    found = opx.find_job(d.app, request.query_params.get("id"))
    if found is None:
        raise JobNotFound(opx.not_found_text(opx.parse_job_id(request.query_params.get("id"))))
    return found


def api_bulk_jobs(d: Dashboard, request: Request, user: Principal, body: dict[str, Any]) -> BulkPlan | BulkJobsDone:
    """Cancel, move or re-prioritise the waiting jobs a filter matches: without ``confirm`` and
    ``upto``, how many (and the ``upto`` to send back); with them, done."""
    for key in ("confirm", "upto", "since"):
        value = body.get(key)
        if value is not None and (type(value) is not int or not 0 <= value <= ID_MAX):
            raise HTTPException(400, f"{key} must be what the first call reported (an integer)")
    action, queue, priority = opx.bulk_target(body.get("action"), body.get("to_queue"), body.get("priority"))
    flt = params.job_filter({k: body.get(k) for k in ("queue", "state", "name", "text")})
    if body.get("confirm") is None or body.get("upto") is None:
        return opx.plan_bulk(d.app, action, flt, queue, priority)
    return opx.run_bulk(d.app, user.username, action, flt, body["upto"], body["confirm"],
                        since=body.get("since") or 0, queue=queue, priority=priority)


# ---------------------------------------------------------------------------------- outside the API's models
async def metrics(d: Dashboard, request: Request, user: Principal) -> Response:
    """Prometheus text (or OpenMetrics, as the scraper accepts) of this app's figures."""
    from ..metrics import render

    body, content_type = await run_in_threadpool(render, d.app, request.headers.get("accept"))
    return Response(body, media_type=content_type)


async def healthz(d: Dashboard, request: Request) -> Response:
    """200 when the database answers, 503 when it does not (for load balancers; no login)."""
    try:
        await run_in_threadpool(d.app.store.now)
    except StoreUnavailable:
        return JSONResponse({"status": "unavailable", "database": "unreachable"}, status_code=503)
    return JSONResponse({"status": "ok"})


@dataclass(frozen=True)
class Endpoint:
    """One API operation: its method and path, its call, the model it answers with."""

    method: str
    path: str
    call: ApiCall
    answer: Any
    """The read model (or union of them) the call returns: its schema is the 200 answer's."""

    @property
    def limit(self) -> str:
        """Which request limits apply (:mod:`.limits`): "enqueue", "actions" or "reads"."""
        if self.method == "POST":
            return "enqueue" if self.path == "/api/enqueue" else "actions"
        return "reads"


ENDPOINTS = (
    Endpoint("GET", "/api/overview", api_overview, Overview),
    Endpoint("GET", "/api/jobs", api_jobs, JobPage),
    Endpoint("GET", "/api/jobs/{job_id}", api_job, JobDetail),
    Endpoint("POST", "/api/jobs/bulk", api_bulk_jobs, BulkPlan | BulkJobsDone),
    Endpoint("GET", "/api/find", api_find, FoundJob),
    Endpoint("POST", "/api/jobs/{job_id}/cancel", api_cancel, Cancelled),
    Endpoint("GET", "/api/workflows", api_workflows, WorkflowList),
    Endpoint("GET", "/api/workflows/{workflow_id}", api_workflow, WorkflowView),
    Endpoint("POST", "/api/workflows/{workflow_id}/cancel", api_cancel_workflow, WorkflowCancelled),
    Endpoint("GET", "/api/dead", api_dead, DeadLetterPage),
    Endpoint("POST", "/api/dead/{action}", api_dead_action, BulkDone | NeedsConfirmation),
    Endpoint("POST", "/api/stale/recover", api_recover, Recovered),
    Endpoint("GET", "/api/workers", api_workers, WorkerList),
    Endpoint("POST", "/api/workers/{action}", api_worker_action, WorkersCommanded),
    Endpoint("GET", "/api/activity", api_activity, WorkerActivity),
    Endpoint("GET", "/api/queues", api_queues, QueueList),
    Endpoint("POST", "/api/queues/{name}/limits", api_queue_limits, QueueLimitsView),
    Endpoint("POST", "/api/queues/{name}/{action}", api_queue_action, QueueToggled),
    Endpoint("GET", "/api/periodic", api_periodic, ScheduleList),
    Endpoint("POST", "/api/periodic", api_schedule_add, ScheduleView),
    Endpoint("POST", "/api/periodic/{name}/run", api_periodic_run, PeriodicRun),
    Endpoint("POST", "/api/periodic/{name}/edit", api_schedule_edit, ScheduleView),
    Endpoint("POST", "/api/periodic/{name}/delete", api_schedule_delete, ScheduleDeleted),
    Endpoint("POST", "/api/periodic/{name}/{action}", api_schedule_toggle, ScheduleView),
    Endpoint("GET", "/api/enqueue", api_jobs_form, EnqueueForm),
    Endpoint("POST", "/api/enqueue", api_enqueue, EnqueuedJobs),
    Endpoint("GET", "/api/audit", api_audit, AuditLog),
    Endpoint("GET", "/api/users", api_users, UserList),
    Endpoint("GET", "/api/me", api_me, Me),
    Endpoint("GET", "/api/alerts", api_alerts, AlertList),
)
