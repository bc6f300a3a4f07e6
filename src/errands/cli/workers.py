"""``errands workers``: list the worker processes, and quiet, resume or stop one (or a host's) from
outside, through the database (each worker reads its command with its next heartbeat)."""

from __future__ import annotations

import json

import click

from ..services import operator as ops
from ..services import workers as fleet
from ..services.models import WorkersCommanded
from .context import CLI, Context


@click.group()
def workers() -> None:
    """List worker processes; quiet, resume or stop them from any host."""


@workers.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON list of the workers table's rows.")
@click.pass_obj
def list_workers(ctx: Context, as_json: bool) -> None:
    """Every registered worker process: id, host, pid, state (running, quiet, stopping, or a command
    it has not read yet), liveness and jobs done."""
    rows = ops.worker_registry(ctx.app())
    if as_json:
        click.echo(json.dumps([w.to_json() for w in rows], indent=2))
        return
    if not rows:
        click.echo("no worker is registered")
    for w in rows:
        alive = "alive" if w.alive else "STALE"
        click.echo(f"{w.id}  {w.state:<16} {alive:<5} pid {w.pid} on {w.hostname}, queues {','.join(w.queues)}, "
                   f"{w.jobs_done} jobs done, last heartbeat {w.seconds_since_heartbeat:.1f}s ago")


def _command(action: str, help_text: str) -> click.Command:
    @click.argument("worker_id", required=False, metavar="[ID]")
    @click.option("--host", "hostname", metavar="NAME", help="Every worker process registered on host NAME.")
    @click.pass_obj
    def command(ctx: Context, worker_id: str | None, hostname: str | None) -> None:
        if (worker_id is None) == (hostname is None):
            raise click.UsageError("give one worker ID (errands workers list) or --host NAME")
        app = ctx.app()
        done = (fleet.command_worker(app, CLI, action, worker_id) if worker_id is not None
                else fleet.command_host(app, CLI, action, str(hostname)))
        _echo(done)

    command.__doc__ = help_text
    return click.command(action)(command)


def _echo(done: WorkersCommanded) -> None:
    for worker_id in done.workers:
        click.echo(f"worker {worker_id}: {done.action} (read with its next heartbeat)")
    for why in done.refused:
        click.echo(f"worker {why}, left as it is", err=True)


workers.add_command(_command("quiet", "Claim nothing more; running jobs finish; the process stays alive, quiet."))
workers.add_command(_command("resume", "A quiet worker claims jobs again."))
workers.add_command(_command("stop", "As SIGTERM: finish running jobs and exit; its supervisor does not replace it."))
