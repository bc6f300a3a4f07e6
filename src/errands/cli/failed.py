"""``errands failed``: read and act on the dead letter."""

from __future__ import annotations

import json
import sys

import click

from ..core.errors import JobNotFound
from ..core.limits import ID_MAX
from ..core.payload import safe_text
from ..services import operator as ops
from ..services.models import DeadJob
from .context import CLI, Context
from .control import echo_history, echo_logs


@click.group()
def failed() -> None:
    """The dead letter: jobs that used up their attempts."""


@failed.command("list")
@click.option("--queue", default=None)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10000))
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def list_failed(ctx: Context, queue: str | None, limit: int, as_json: bool) -> None:
    """Newest first: id, job, queue, attempts, error."""
    rows = ctx.app().failed(queue, limit)
    if as_json:
        # Whatever an entry holds (a payload that is no JSON, text that is no UTF-8): valid JSON out.
        click.echo(json.dumps(ops.displayable([{
            "id": r.id, "name": r.name, "queue": r.queue, "payload": ops.display_arguments(r.payload),
            "attempts": r.attempts, "failed_at": r.failed_at.isoformat(), "error_type": r.error_type,
            "error_message": r.error_message, "label": r.label} for r in rows]), indent=2))
        return
    if not rows:
        click.echo("the dead letter is empty")
    for r in rows:
        label = f"  [{r.label}]" if r.label else ""
        click.echo(safe_text(f"{r.id:>8}  {r.failed_at:%Y-%m-%d %H:%M:%S}  {r.queue}  {r.name}{label}  "
                             f"attempts={r.attempts}\n          {r.error_type}: {str(r.error_message)[:300]}"))


@failed.command("show")
@click.argument("job_id", type=click.IntRange(1, ID_MAX))
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def show_failed(ctx: Context, job_id: int, as_json: bool) -> None:
    """One dead-letter entry with its whole error history (tracebacks too, where kept)."""
    detail = ops.job_detail(ctx.app(), job_id)
    if not isinstance(detail, DeadJob):
        raise click.ClickException(f"job {job_id} is not in the dead letter (it is {detail.state})")
    info = ops.displayable(detail)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    for key in ("id", "name", "label", "queue", "attempts", "created_at", "failed_at"):
        if info.get(key) not in (None, ""):
            click.echo(safe_text(f"{key:>18}: {info[key]}"))
    click.echo(f"{'arguments':>18}: {json.dumps(info['arguments'])}")
    click.echo(safe_text(f"{'error':>18}: {info['error_type']}: {info['error_message']}"))
    click.echo(f"{'errors':>18}:")
    echo_history(info["errors"])
    if info.get("logs"):
        click.echo(f"{'logs':>18}:")
        echo_logs(info["logs"])


@failed.command("retry")
@click.argument("job_id", type=click.IntRange(1, ID_MAX), required=False)
@click.option("--all", "all_", is_flag=True, help="Every entry (of --queue when given).")
@click.option("--queue", default=None)
@click.pass_obj
def retry(ctx: Context, job_id: int | None, all_: bool, queue: str | None) -> None:
    """Move JOB_ID (or --all) back to the queue with fresh attempts."""
    if (job_id is None) == (not all_):
        raise click.UsageError("give either a JOB_ID or --all")
    app = ctx.app()
    if job_id is not None:
        if not ops.retry_failed(app, CLI, [job_id]):
            raise JobNotFound(f"no dead-letter entry with id {job_id}")
        click.echo("retried 1 job(s)")
        return
    ids = ops.matching_failed(app, ops.JobFilter(queue=queue), limit=2**62)
    with click.progressbar(length=len(ids), label="retrying", file=sys.stderr) as bar:
        moved = ops.retry_failed(app, CLI, ids, progress=bar.update)
    click.echo(f"retried {moved} job(s)")


@failed.command("forget")
@click.argument("job_id", type=click.IntRange(1, ID_MAX), required=False)
@click.option("--all", "all_", is_flag=True, help="Every entry (of --queue when given).")
@click.option("--queue", default=None)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation with --all.")
@click.pass_obj
def forget(ctx: Context, job_id: int | None, all_: bool, queue: str | None, yes: bool) -> None:
    """Delete JOB_ID (or --all) from the dead letter for good."""
    if (job_id is None) == (not all_):
        raise click.UsageError("give either a JOB_ID or --all")
    if all_ and not yes:
        click.confirm(f"forget every failed job{f' of queue {queue}' if queue else ''}?", abort=True)
    app = ctx.app()
    if job_id is not None:
        count = ops.forget_failed(app, CLI, [job_id])
        if not count:
            raise JobNotFound(f"no dead-letter entry with id {job_id}")
    else:
        ids = ops.matching_failed(app, ops.JobFilter(queue=queue), limit=2**62)
        with click.progressbar(length=len(ids), label="forgetting", file=sys.stderr) as bar:
            count = ops.forget_failed(app, CLI, ids, progress=bar.update)
    click.echo(f"forgot {count} job(s)")
