"""``errands enqueue`` and ``errands status``."""

from __future__ import annotations

import json
from typing import Any

import click

from ..core.limits import MAX_DELAY
from ..core.payload import parse_json
from ..services.operator import enqueue_one
from ..services.report import status_report
from .context import CLI, Context


def _json_option(value: str | None, kind: type, what: str) -> Any:
    if value is None:
        return kind()
    try:  # depth-bounded: 5,000 nested brackets are refused here, not by a RecursionError
        parsed = parse_json(value, "the keyword arguments" if what == "--kwargs" else "the arguments")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=what) from None
    if not isinstance(parsed, kind):
        raise click.BadParameter(f"must be a JSON {'array' if kind is list else 'object'}", param_hint=what)
    return parsed


@click.command()
@click.argument("name")
@click.option("--args", "args_json", metavar="JSON", help='Positional arguments as a JSON array, e.g. "[42]".')
@click.option("--kwargs", "kwargs_json", metavar="JSON", help='Keyword arguments as a JSON object.')
@click.option("--queue", default=None, help="Queue (default: the job's).")
@click.option("--priority", type=int, default=None, help="Higher runs first.")
@click.option("--delay", type=click.FloatRange(0, MAX_DELAY), default=None,
              help="Seconds before the job may run (at most ten years).")
@click.option("--expires-in", type=click.FloatRange(0, MAX_DELAY, min_open=True), default=None,
              help="Seconds after it is due by which it must have started, else it ends as expired.")
@click.option("--deadline", type=click.FloatRange(0, MAX_DELAY, min_open=True), default=None,
              help="Seconds from now after which no attempt starts (errands.DeadlineExceeded).")
@click.pass_obj
def enqueue(ctx: Context, name: str, args_json: str | None, kwargs_json: str | None, queue: str | None,
            priority: int | None, delay: float | None, expires_in: float | None, deadline: float | None) -> None:
    """Enqueue registered job NAME and print its id."""
    app = ctx.app(required=True, missing_ok=True)  # the app's own code would create it too
    args = _json_option(args_json, list, "--args")
    kwargs = _json_option(kwargs_json, dict, "--kwargs")
    options = {k: v for k, v in dict(queue=queue, priority=priority, delay=delay, expires_in=expires_in,
                                     deadline=deadline).items() if v is not None}
    click.echo(enqueue_one(app, CLI, name, args, kwargs, **options))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object: {queues: {...}, workers: [...]}.")
@click.pass_obj
def status(ctx: Context, as_json: bool) -> None:
    """Counts per queue (ready, delayed, running, stale, failed) and live workers."""
    report = status_report(ctx.app())
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    queues = report["queues"]
    if not queues:
        click.echo("no jobs")
    else:
        click.echo(f"{'queue':<24}{'ready':>8}{'delayed':>9}{'blocked':>9}{'running':>9}{'stale':>8}{'failed':>8}")
        for name, c in queues.items():
            stale = click.style(f"{c['stale']:>8}", fg="yellow") if c["stale"] else f"{c['stale']:>8}"
            paused = "  (paused)" if name in report.get("paused", []) else ""
            click.echo(f"{name:<24}{c['ready']:>8}{c['delayed']:>9}{c['blocked']:>9}{c['running']:>9}{stale}"
                       f"{c['failed']:>8}{paused}")
    reads = report["reads"]
    if reads["state"] != "none":  # a read replica is configured: say where these figures come from
        click.echo(reads["line"])
    workers = report["workers"]
    alive = [w for w in workers if w["alive"]]
    if not alive:
        click.secho("no worker is running (no heartbeat recently): start one with `errands worker`", fg="red")
    for w in workers:
        state = "alive" if w["alive"] else "STALE"
        if w.get("state", "running") != "running":
            state += f", {w['state']}"
        held = "" if w.get("connections") is None else f"{w['connections']} of "
        click.echo(f"worker {w['id']} {state}: queues {w['queues']}, concurrency {w['concurrency']}, "
                   f"{held}at most {w['connection_bound']} connections, "
                   f"{w['jobs_done']} jobs done, last heartbeat {w['seconds_since_heartbeat']:.1f}s ago "
                   f"(alive within {w['alive_within']:g}s{' of one' if w['lease'] is not None else ''})")
