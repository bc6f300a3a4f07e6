"""``errands periodic``: list the schedules (the code's and the stored ones), and add, edit, pause,
resume and delete stored schedules while workers run (every scheduler uses a change from its next
tick).  Each change is audited, as the dashboard's are."""

from __future__ import annotations

import json
from typing import Any

import click

from ..core.schedules import CATCH_UP_MODES, MAX_CATCH_UP_LIMIT
from ..services import schedules as svc
from ..services.models import ScheduleView
from .context import CLI, Context

PRIORITY = click.IntRange(-(2**31), 2**31 - 1)


@click.group(invoke_without_command=True)
@click.pass_context
def periodic(click_ctx: click.Context) -> None:
    """The schedules: cron expression, last slot run and the next ones (``list``, the default); add,
    edit, pause, resume and delete the ones stored in the database.  Schedules from the code
    (@app.periodic) are read-only here."""
    if click_ctx.invoked_subcommand is None:
        click_ctx.invoke(list_schedules)


@periodic.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per schedule.")
@click.pass_obj
def list_schedules(ctx: Context, as_json: bool = False) -> None:
    """Every schedule, the code's first."""
    views = svc.schedules_view(ctx.app(required=True))
    if not views and not as_json:
        click.echo("this app has no periodic jobs")
    for view in views:
        click.echo(json.dumps(view.to_json()) if as_json else _describe(view))


def _describe(view: ScheduleView) -> str:
    where = "from code" if view.source == "code" else f"stored, version {view.version}"
    state = "  PAUSED" if view.paused else ""
    lines = [f"{view.name}  {view.cron!r} ({view.timezone})  {where}{state}",
             f"    job: {view.job}  queue: {view.queue}  catch_up: {view.catch_up}"
             + (f" (at most {view.catch_up_limit})" if view.catch_up == "all" and view.catch_up_limit else ""),
             f"    arguments: {json.dumps(view.arguments)[:300]}",
             f"    last slot: {view.last_slot or 'never'}",
             f"    next: {', '.join(view.next) or '-'}"]
    if view.problem:
        lines.append(f"    does not run: {view.problem}")
    return "\n".join(lines)


def _options(func: Any) -> Any:
    for option in reversed((
        click.option("--timezone", "--tz", "timezone", help="IANA time zone of the cron's wall clock (default UTC)."),
        click.option("--args", "arguments", metavar="JSON",
                     help='Arguments: a JSON array, or {"args": [...], "kwargs": {...}}.'),
        click.option("--queue", help="Queue of the runs (default: the job's)."),
        click.option("--priority", type=PRIORITY, help="Priority of the runs (default: the job's)."),
        click.option("--catch-up", type=click.Choice(CATCH_UP_MODES),
                     help="Slots missed while no scheduler ran: none, latest (the default) or all."),
        click.option("--catch-up-limit", type=click.IntRange(1, MAX_CATCH_UP_LIMIT),
                     help="With --catch-up all: at most this many missed slots run (default 100)."),
    )):
        func = option(func)
    return func


def _values(timezone: str | None, arguments: str | None, queue: str | None, priority: int | None,
            catch_up: str | None, catch_up_limit: int | None) -> dict[str, Any]:
    values: dict[str, Any] = {k: v for k, v in (("timezone", timezone), ("queue", queue), ("priority", priority),
                                                ("catch_up", catch_up), ("catch_up_limit", catch_up_limit))
                              if v is not None}
    if arguments is not None:
        values["args"], values["kwargs"] = svc.parse_arguments(arguments)
    return values


@periodic.command("add")
@click.argument("name")
@click.argument("job")
@click.argument("cron")
@_options
@click.pass_obj
def add(ctx: Context, name: str, job: str, cron: str, **options: Any) -> None:
    """Store schedule NAME: registered JOB on CRON (quote it: '*/5 * * * *').  Workers start it at
    their next tick; its first run is its first slot after now."""
    view = svc.add_schedule(ctx.app(required=True), CLI, name, job, cron, **_values(**options))
    click.echo(f"schedule {name} added (version {view.version}); next: {', '.join(view.next)}")


@periodic.command("edit")
@click.argument("name")
@click.option("--job", help="Another registered job.")
@click.option("--cron", help="Another cron expression (the schedule starts afresh: its next slot after now).")
@_options
@click.pass_obj
def edit(ctx: Context, name: str, job: str | None, cron: str | None, **options: Any) -> None:
    """Change stored schedule NAME in place (only the options given); workers use it from their next tick."""
    changes = _values(**options)
    changes.update({k: v for k, v in (("job", job), ("cron", cron)) if v is not None})
    if "timezone" in changes and changes["timezone"] == "":
        changes["timezone"] = None
    view = svc.edit_schedule(ctx.app(required=True), CLI, name, **changes)
    click.echo(f"schedule {name} is at version {view.version}; next: {', '.join(view.next) or '-'}")


@periodic.command("pause")
@click.argument("name")
@click.pass_obj
def pause(ctx: Context, name: str) -> None:
    """Stop stored schedule NAME from enqueueing (it stays, with its settings)."""
    svc.set_schedule_paused(ctx.app(required=True), CLI, name, True)
    click.echo(f"schedule {name} paused")


@periodic.command("resume")
@click.argument("name")
@click.pass_obj
def resume(ctx: Context, name: str) -> None:
    """Resume stored schedule NAME from its next slot (slots passed while paused do not run)."""
    view = svc.set_schedule_paused(ctx.app(required=True), CLI, name, False)
    click.echo(f"schedule {name} resumed; next: {', '.join(view.next)}")


@periodic.command("delete")
@click.argument("name")
@click.pass_obj
def delete(ctx: Context, name: str) -> None:
    """Delete stored schedule NAME (the jobs it enqueued stay)."""
    svc.delete_schedule(ctx.app(required=True), CLI, name)
    click.echo(f"schedule {name} deleted")
