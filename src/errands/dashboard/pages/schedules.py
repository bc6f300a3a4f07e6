"""Schedules: the code's (read-only) and the stored ones, which admins add, edit, pause, resume and
delete here (every scheduler uses a change from its next tick); running one now."""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...core.errors import ErrandsError
from ...core.schedules import CATCH_UP_MODES
from ...services import operator as ops
from ...services import schedules as sched
from ..auth import Principal
from ..rendering import Dashboard

TOGGLES = ("pause", "resume", "delete")
FIELDS = ("name", "job", "cron", "timezone", "arguments", "queue", "priority", "catch_up", "catch_up_limit")


async def periodic_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """Every schedule, its last and next runs; for admins, the form that adds (or edits) a stored one."""
    schedules = await run_in_threadpool(ops.periodic_view, d.app)
    editing = request.query_params.get("edit")
    form: dict[str, Any] = {"catch_up": "latest"}
    if editing and any(v.source == "database" and v.name == editing for v in schedules):
        stored = await run_in_threadpool(sched.stored_settings, d.app, editing)
        arguments = stored["args"] if not stored["kwargs"] else {"args": stored["args"], "kwargs": stored["kwargs"]}
        form = {**stored, "name": editing, "arguments": json.dumps(arguments),
                "priority": "" if stored["priority"] is None else stored["priority"],
                "catch_up_limit": stored["catch_up_limit"] or ""}
    return d.render(request, "periodic.html", user, schedules=schedules, form=form,
                    editing=editing if form.get("name") else None, jobs=sorted(d.app.registry),
                    catch_up_modes=CATCH_UP_MODES)


async def periodic_run(d: Dashboard, request: Request, user: Principal) -> Response:
    """Enqueue a periodic job now, then show it."""
    job_id = await run_in_threadpool(ops.run_periodic_now, d.app, user.username, request.path_params["name"])
    return RedirectResponse(d.url(request, f"/jobs/{job_id}"), status_code=303)


async def schedule_save(d: Dashboard, request: Request, user: Principal) -> Response:
    """Add a stored schedule (``/periodic/add``) or edit one (``/periodic/{name}/edit``) from the form."""
    form = await request.form()
    values = {k: str(form.get(k) or "").strip() for k in FIELDS}
    name = request.path_params.get("name")
    try:
        settings = _settings(values)
        if name is None:
            await run_in_threadpool(sched.add_schedule, d.app, user.username, values["name"], values["job"],
                                    values["cron"], **settings)
        else:
            await run_in_threadpool(sched.edit_schedule, d.app, user.username, name, job=values["job"],
                                    cron=values["cron"], **settings)
    except ErrandsError as exc:
        return d.render(request, "error.html", user, status=400, message=str(exc))
    done = f"schedule {name or values['name']} {'saved' if name else 'added'}"
    return RedirectResponse(d.url(request, "/periodic", done=done), status_code=303)


async def schedule_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Pause, resume or delete a stored schedule."""
    name, action = request.path_params["name"], request.path_params["action"]
    if action not in TOGGLES:
        raise HTTPException(404)
    if action == "delete":
        await run_in_threadpool(sched.delete_schedule, d.app, user.username, name)
    else:
        await run_in_threadpool(sched.set_schedule_paused, d.app, user.username, name, action == "pause")
    return RedirectResponse(d.url(request, "/periodic", done=f"{action}:{name}"), status_code=303)


def _settings(values: dict[str, str]) -> dict[str, Any]:
    """The form's optional fields as the service takes them (empty: the default)."""
    args, kwargs = sched.parse_arguments(values["arguments"])
    settings: dict[str, Any] = {"timezone": values["timezone"] or None, "queue": values["queue"] or None,
                                "args": args, "kwargs": kwargs, "catch_up": values["catch_up"] or "latest",
                                "priority": _integer(values["priority"], "priority"),
                                "catch_up_limit": _integer(values["catch_up_limit"], "catch_up_limit")}
    return settings


def _integer(text: str, what: str) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise sched.ScheduleFormError(f"{what} must be a whole number") from None
