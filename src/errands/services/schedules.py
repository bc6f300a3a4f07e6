"""Schedules, as operators see and change them: the code's (``@app.periodic``, read-only here) and the
ones stored in the database, which they add, edit, pause, resume and delete while workers run.

Every change is checked here (a registered job, a cron expression and time zone that parse,
arguments the job accepts, a queue name, a priority, a catch-up policy), stored, and audited; every
scheduler picks it up at its next tick (:mod:`errands.worker.scheduler`).  The CLI, the dashboard's
periodic page and the JSON API call these functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..core.config import check_queue_name
from ..core.cron import Cron
from ..core.errors import ConfigurationError, EnqueueError, InvalidQueueName, JobNotFound
from ..core.payload import decode_arguments, for_display, parse_json
from ..core.schedules import (
    DEFAULT_CATCH_UP,
    CatchUp,
    ScheduleRow,
    StoredSchedule,
    check_name,
    check_priority,
)
from .models import ScheduleView

if TYPE_CHECKING:
    from ..app import Errands

EDITABLE = ("job", "cron", "timezone", "args", "kwargs", "queue", "priority", "catch_up", "catch_up_limit")
"""What an edit may change (``args``/``kwargs`` together make the stored arguments)."""


class ScheduleNotFound(JobNotFound):
    """No stored schedule of that name (a schedule from code cannot be changed at run time): a 404 in the API."""


class ScheduleFormError(ConfigurationError):
    """A value typed in a form or the CLI that is not what the setting takes."""


def schedules_view(app: Errands) -> list[ScheduleView]:
    """Every schedule, the code's first: cron, time zone, the last slot run and the next three."""
    store = app.store
    last = store.features.periodic_slots()
    now = store.now()
    out = []
    for name, schedule in sorted(app.schedules.items()):
        out.append(ScheduleView(name, schedule.cron.expression, _zone(schedule.cron), _iso(last.get(name)),
                                _next(schedule.cron, now), schedule.job.options.queue, "code", schedule.job.name,
                                {"args": list(schedule.args), "kwargs": schedule.kwargs},
                                schedule.job.options.priority, schedule.catch_up.mode, schedule.catch_up.limit))
    for row in store.schedules.rows():
        out.append(_stored_view(app, row, last.get(row.name), now))
    return out


def schedule_view(app: Errands, name: str) -> ScheduleView:
    """One stored schedule; ScheduleNotFound if there is none of that name."""
    row = app.store.schedules.get(name)
    if row is None:
        raise _not_found(app, name)
    return _stored_view(app, row, app.store.schedules.last_slot(name), app.store.now())


def add_schedule(app: Errands, actor: str, name: str, job: str, cron: str, **values: Any) -> ScheduleView:
    """Store a new schedule (``values``: timezone, args, kwargs, queue, priority, catch_up,
    catch_up_limit), audited; its first run is its first slot after now."""
    check_name(name)
    if name in app.schedules:
        raise ConfigurationError(f"a schedule named {name!r} is defined in the code (@app.periodic): choose "
                                 "another name")
    _refuse_unknown(values, set(EDITABLE) - {"job", "cron"})
    columns = _columns(app, {"job": job, "cron": cron, "timezone": None, "args": [], "kwargs": {}, "queue": None,
                             "priority": None, "catch_up": DEFAULT_CATCH_UP, "catch_up_limit": None, **values})
    row = app.store.schedules.add(name, columns)
    app.store.accounts.audit(actor, "schedule-add", f"schedule {name}", _describe(row))
    return schedule_view(app, name)


def edit_schedule(app: Errands, actor: str, name: str, **changes: Any) -> ScheduleView:
    """Change a stored schedule in place (any of :data:`EDITABLE`), audited; its version goes up and
    every scheduler uses the new definition from its next tick.  A new cron or time zone starts the
    schedule afresh: its next run is its first slot after now."""
    _refuse_unknown(changes, set(EDITABLE))
    current = app.store.schedules.get(name)
    if current is None:
        raise _not_found(app, name)
    merged = _current_values(current)
    merged.update(changes)
    columns = _columns(app, merged)
    changed = {k: v for k, v in columns.items() if v != _stored_columns(current).get(k)}
    row = app.store.schedules.edit(name, changed) if changed else current
    if row is None:
        raise _not_found(app, name)
    app.store.accounts.audit(actor, "schedule-edit", f"schedule {name}",
                             f"{', '.join(sorted(changed)) or 'nothing changed'}; {_describe(row)}")
    return schedule_view(app, name)


def set_schedule_paused(app: Errands, actor: str, name: str, paused: bool) -> ScheduleView:
    """Pause or resume a stored schedule, audited.  A resumed schedule starts with its next slot: the
    slots that passed while it was paused do not run."""
    row = app.store.schedules.set_paused(name, paused)
    if row is None:
        raise _not_found(app, name)
    app.store.accounts.audit(actor, "schedule-pause" if paused else "schedule-resume", f"schedule {name}",
                             f"version {row.version}")
    return schedule_view(app, name)


def delete_schedule(app: Errands, actor: str, name: str) -> bool:
    """Delete a stored schedule (jobs it enqueued stay), audited."""
    if not app.store.schedules.delete(name):
        raise _not_found(app, name)
    app.store.accounts.audit(actor, "schedule-delete", f"schedule {name}")
    return True


def stored_settings(app: Errands, name: str) -> dict[str, Any]:
    """A stored schedule's settings as stored (the form that edits it starts from them, so saving it
    unchanged changes nothing): job, cron, timezone, args, kwargs, queue, priority, catch_up, catch_up_limit."""
    row = app.store.schedules.get(name)
    if row is None:
        raise _not_found(app, name)
    return _current_values(row)


def parse_arguments(text: str | None, what: str = "arguments") -> tuple[list[Any], dict[str, Any]]:
    """Arguments as typed in a form or the CLI: a JSON array (positional), an object with ``args``
    and/or ``kwargs``, or empty (none)."""
    if text is None or not text.strip():
        return [], {}
    try:
        value = parse_json(text, what)
    except ValueError as exc:
        raise ScheduleFormError(str(exc)) from None
    if isinstance(value, list):
        return value, {}
    if isinstance(value, dict) and set(value) <= {"args", "kwargs"}:
        args, kwargs = value.get("args", []), value.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    raise ScheduleFormError(f'{what} must be a JSON array, or an object {{"args": [...], "kwargs": {{...}}}}')


# ---------------------------------------------------------------------------------- checks
def _columns(app: Errands, values: Mapping[str, Any]) -> dict[str, Any]:
    """The stored columns of a schedule, every value checked; ConfigurationError with what is wrong."""
    job = values["job"]
    definition = app.registry.get(job) if isinstance(job, str) else None
    if definition is None:
        raise ConfigurationError(f"no job named {str(job)[:200]!r} is registered in this app (a schedule runs a "
                                 "registered job: `errands periodic list` shows the schedules, the enqueue page "
                                 "the jobs)")
    cron, zone = values["cron"], values["timezone"] or None
    if zone == "UTC":  # the default, stored as NULL: an edit that names it changes nothing
        zone = None
    if not isinstance(cron, str) or len(cron) > 255 or not (zone is None or isinstance(zone, str)):
        raise ConfigurationError("cron must be a cron expression and timezone an IANA name (or empty: UTC)")
    Cron(cron, zone)  # ConfigurationError with the field at fault
    queue = values["queue"] or None
    if queue is not None:
        try:
            check_queue_name(queue)
        except InvalidQueueName as exc:
            raise ConfigurationError(str(exc)) from None
    limit = values["catch_up_limit"]
    CatchUp(values["catch_up"], 1 if limit is None else limit)
    args, kwargs = values["args"], values["kwargs"]
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        raise ConfigurationError("args must be a JSON array and kwargs a JSON object")
    try:
        payload = definition.using(**({"queue": queue} if queue else {})).prepare(*args, **kwargs).payload
    except EnqueueError as exc:
        raise ConfigurationError(f"job {definition.name}: {exc}") from None
    return {"job": definition.name, "cron": cron.strip(), "timezone": zone, "payload": payload, "queue": queue,
            "priority": check_priority(values["priority"]), "catch_up": values["catch_up"], "catch_up_limit": limit}


def _refuse_unknown(values: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise ConfigurationError(f"a schedule has no setting {unknown[0]!r} (settings: {', '.join(EDITABLE)})")


def _current_values(row: ScheduleRow) -> dict[str, Any]:
    args, kwargs = _arguments(row)
    return {"job": row.job, "cron": row.cron, "timezone": row.timezone, "args": args, "kwargs": kwargs,
            "queue": row.queue, "priority": row.priority, "catch_up": row.catch_up,
            "catch_up_limit": row.catch_up_limit}


def _stored_columns(row: ScheduleRow) -> dict[str, Any]:
    return {"job": row.job, "cron": row.cron, "timezone": row.timezone, "payload": row.payload, "queue": row.queue,
            "priority": row.priority, "catch_up": row.catch_up, "catch_up_limit": row.catch_up_limit}


def _arguments(row: ScheduleRow) -> tuple[list[Any], dict[str, Any]]:
    try:
        return decode_arguments(row.payload)
    except ValueError:  # a row another program wrote: an edit must give the arguments again
        return [], {}


def _stored_view(app: Errands, row: ScheduleRow, last: datetime | None, now: datetime) -> ScheduleView:
    try:
        built = StoredSchedule(row, app.registry.get)
        problem, nexts, zone = None, _next(built.cron, now), _zone(built.cron)
        queue = built.job.options.queue
    except Exception as exc:  # a row this app cannot run: shown with the reason, never a failed page
        problem, nexts, zone, queue = str(exc)[:300], [], row.timezone or "UTC", row.queue or ""
    if row.name in app.schedules:
        problem = "the code defines a schedule of this name; this stored one does not run"
    return ScheduleView(row.name, row.cron, zone, _iso(last), [] if row.paused else nexts, queue, "database",
                        row.job, for_display(row.payload), row.priority, row.catch_up, row.catch_up_limit,
                        row.paused, row.version, problem)


def _describe(row: ScheduleRow) -> str:
    parts = [f"{row.job} at {row.cron!r}", row.timezone or "UTC", f"arguments {row.payload[:200]}"]
    parts += [f"queue {row.queue}"] if row.queue else []
    parts += [f"priority {row.priority}"] if row.priority is not None else []
    parts += [f"catch_up {row.catch_up}" + (f" (at most {row.catch_up_limit})" if row.catch_up_limit else "")]
    return ", ".join(parts) + f"; version {row.version}"


def _not_found(app: Errands, name: str) -> ScheduleNotFound:
    if name in app.schedules:
        return ScheduleNotFound(f"schedule {name!r} is defined in the code (@app.periodic): change it there")
    return ScheduleNotFound(f"no stored schedule named {str(name)[:200]!r}")


def _next(cron: Cron, now: datetime) -> list[str]:
    nexts, moment = [], now
    for _ in range(3):
        moment = cron.next_after(moment)
        nexts.append(moment.isoformat())
    return nexts


def _zone(cron: Cron) -> str:
    return str(getattr(cron.tz, "key", "UTC"))


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


__all__ = ["EDITABLE", "ScheduleFormError", "ScheduleNotFound", "add_schedule", "delete_schedule", "edit_schedule",
           "parse_arguments", "schedule_view", "schedules_view", "set_schedule_paused", "stored_settings"]
