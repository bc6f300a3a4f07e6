"""``errands queue``, ``errands job`` and ``errands batch``: look at and steer single queues, jobs and
batches (``errands periodic`` is in :mod:`.schedules`)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..core.errors import JobNotFound
from ..core.limits import ID_MAX
from ..core.payload import safe_text
from ..core.rows import dead_state
from ..services import operator as ops
from ..services.operator import display_arguments, display_checkpoint, displayable
from .context import CLI, Context

JOB_ID = click.IntRange(1, ID_MAX)
"""A job (or batch) id: a number outside 1..ID_MAX names nothing, and fails the database driver."""


@click.group()
def queue() -> None:
    """Pause, resume, list and purge queues."""


@queue.command("pause")
@click.argument("name")
@click.pass_obj
def pause(ctx: Context, name: str) -> None:
    """Workers stop claiming from NAME; running jobs finish."""
    ops.set_paused(ctx.app(), CLI, name, True)
    click.echo(f"queue {name} paused")


@queue.command("resume")
@click.argument("name")
@click.pass_obj
def resume(ctx: Context, name: str) -> None:
    """Workers claim from NAME again."""
    ops.set_paused(ctx.app(), CLI, name, False)
    click.echo(f"queue {name} resumed")


@queue.command("list")
@click.pass_obj
def list_queues(ctx: Context) -> None:
    """Every queue with jobs or a pause, and whether it is paused."""
    app = ctx.app()
    paused = set(app.paused_queues())
    counts = app.counts()
    for name in sorted(set(counts) | paused):
        c = counts.get(name)
        waiting = 0 if c is None else c.ready + c.delayed + c.blocked
        click.echo(f"{name:<30} {'paused' if name in paused else 'active':<7} {waiting} waiting")


@queue.command("purge")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def purge(ctx: Context, name: str, yes: bool) -> None:
    """Cancel every job waiting in NAME (running jobs are left to finish).

    Each job ends as cancelled, as `errands job cancel` would end it (its batch counts it, its
    result record says "purged from its queue"); a job a worker claims meanwhile is left to run.
    The bar shows the progress on long queues."""
    app = ctx.app()
    waiting = ops.waiting_in(app, name)
    if not waiting:
        click.echo(f"queue {name} has no waiting job")
        return
    if not yes:
        click.confirm(f"cancel {len(waiting)} waiting job(s) of queue {name}?", abort=True)
    with click.progressbar(length=len(waiting), label=f"purging {name}", file=sys.stderr) as bar:
        cancelled = ops.purge_queue(app, CLI, name, waiting, progress=bar.update)
    click.echo(f"cancelled {cancelled} waiting job(s) of queue {name}")


@click.group()
def job() -> None:
    """One job: show it, cancel it."""


def _describe(ctx: Context, job_id: int) -> dict[str, Any]:
    info = _describe_row(ctx, job_id)
    errors, _ = ops.error_history(ctx.app(), job_id)
    if errors:
        info["errors"] = [e.to_json() for e in errors]
    logs, _ = ops.run_logs(ctx.app(), job_id)
    if logs:
        info["logs"] = [a.to_json() for a in logs]
    return info


def _describe_row(ctx: Context, job_id: int) -> dict[str, Any]:
    app = ctx.app()
    store = app.store
    row = store.jobs.get_job(job_id)
    if row is not None:
        return {"id": row.id, "name": row.name, "label": row.label, "queue": row.queue,
                "state": row.state(store.now()).value,
                "arguments": display_arguments(row.payload), "attempts": row.attempts, "max_attempts": row.max_attempts,
                "priority": row.priority, "created_at": row.created_at.isoformat(),
                "available_at": row.available_at.isoformat(), "owner": row.reserved_by,
                "lease_until": None if row.reserved_until is None else row.reserved_until.isoformat(),
                "waits_for": [parent for _, parent in store.insights.dependencies_of(row.id)],
                "batch_id": row.batch_id, "rate_key": row.rate_key, "last_error": row.last_error,
                "progress": row.progress, "progress_message": row.progress_message,
                "checkpoint": display_checkpoint(row.checkpoint), "resumptions": row.resumptions or None,
                "cancel_requested": row.cancel_requested_at is not None,
                "expires_at": None if row.expires_at is None else row.expires_at.isoformat(),
                "deadline_at": None if row.deadline_at is None else row.deadline_at.isoformat()}
    dead = store.jobs.get_failed(job_id)
    if dead is not None:
        return {"id": dead.id, "name": dead.name, "label": dead.label, "queue": dead.queue,
                "state": dead_state(dead.error_type, dead.error_message).value,
                "arguments": display_arguments(dead.payload), "attempts": dead.attempts,
                "failed_at": dead.failed_at.isoformat(), "error": f"{dead.error_type}: {dead.error_message}",
                "checkpoint": display_checkpoint(dead.checkpoint)}
    result = store.features.get_result(job_id)
    if result is not None:
        return {"id": result.id, "name": result.name, "label": result.label, "queue": result.queue,
                "state": result.state.value,
                "result": result.result, "attempts": result.attempts, "finished_at": result.finished_at.isoformat(),
                "message": result.message, "batch_id": result.batch_id}
    raise JobNotFound(f"job {job_id} is in no table: it finished (without a kept result), or never existed")


@job.command("show")
@click.argument("job_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def show(ctx: Context, job_id: int, as_json: bool) -> None:
    """State, arguments, attempts, owner, lease, progress and result of JOB_ID."""
    info = displayable(_describe(ctx, job_id))  # whatever the row holds: valid JSON, printable text
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
        return
    for key, value in info.items():
        if value is None or value == "":
            continue
        if key in ("errors", "logs"):
            click.echo(f"{key:>18}:")
            (echo_history if key == "errors" else echo_logs)(value)
            continue
        if key == "progress" and isinstance(value, (int, float)):
            value = f"{value * 100:.0f}%"
        click.echo(f"{key:>18}: {json.dumps(value) if isinstance(value, (dict, list)) else safe_text(value)}")


def echo_history(entries: list[dict[str, Any]]) -> None:
    """A job's error history, one attempt a line (tracebacks indented below their attempt)."""
    for e in entries:
        click.echo(safe_text(f"{'attempt ' + str(e['attempt']):>18}  {e['failed_at']}  "
                             f"{e['error_type']}: {str(e['error_message'])[:300]}"))
        if e.get("traceback"):
            click.echo("\n".join("                    " + line for line in str(e["traceback"]).splitlines()))


def echo_logs(attempts: list[dict[str, Any]]) -> None:
    """What each attempt logged: a heading line per attempt, then its records, indented (a record's
    traceback below it); every line made printable."""
    pad = " " * 20
    for a in attempts:
        dropped = f", {a['dropped']} earlier not kept" if a.get("dropped") else ""
        click.echo(safe_text(f"{'attempt ' + str(a['attempt']):>18}  {a['logged_at']}  {a.get('worker') or ''}  "
                             f"({len(a['records'])} records{dropped})"))
        for r in a["records"]:
            at = str(r.get("at") or "?")[11:23]
            lines = f"{at} {r['level']} {r['logger']}: {r['message']}".splitlines() or [""]
            if r.get("traceback"):
                lines += ["  " + line for line in str(r["traceback"]).splitlines()]
            click.echo("\n".join(safe_text(pad + line) for line in lines))


@job.command("cancel")
@click.argument("job_id", type=JOB_ID)
@click.pass_obj
def cancel(ctx: Context, job_id: int) -> None:
    """Cancel JOB_ID: a waiting job never runs; a running one is asked to stop."""
    outcome = ops.cancel_job(ctx.app(), CLI, job_id)
    click.echo({"cancelled": f"job {job_id} cancelled (it will not run)",
                "requested": f"job {job_id} is running: cancellation requested",
                "gone": f"job {job_id} had already ended"}[outcome])


@click.command()
@click.argument("batch_id", type=JOB_ID)
@click.pass_obj
def batch(ctx: Context, batch_id: int) -> None:
    """Progress of batch (or chain) BATCH_ID."""
    row = ctx.app().batch_status(batch_id)
    if row is None:
        raise JobNotFound(f"no batch with id {batch_id}")
    state = "complete" if row.completed_at else "running"
    click.echo(f"{row.kind} {row.id}: {row.done} done, {row.failed} failed, {row.pending} pending of "
               f"{row.total} ({row.percent:g}%), {state}")

