"""``errands workflow``: a workflow's (chain's, batch's) state, progress and steps, and
cancelling what has not run."""

from __future__ import annotations

import json
from collections import Counter

import click

from ..core.payload import safe_text
from ..services import workflows as flows
from ..services.operator import displayable
from .context import CLI, Context
from .control import JOB_ID


@click.group()
def workflow() -> None:
    """One workflow (or chain, or batch): show it, cancel it."""


def _cell(text: object, width: int) -> str:
    value = safe_text(str(text))
    return value if len(value) <= width else value[:width - 1] + "…"


@workflow.command("show")
@click.argument("workflow_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="Everything, every step included, as JSON.")
@click.option("--limit", type=click.IntRange(0), default=200, show_default=True,
              help="Steps listed (0: all of them).")
@click.pass_obj
def show(ctx: Context, workflow_id: int, as_json: bool, limit: int) -> None:
    """State, progress and steps of WORKFLOW_ID (a workflow, chain or batch id)."""
    view = flows.workflow_view(ctx.app(), workflow_id)
    if as_json:
        click.echo(json.dumps(displayable(view), indent=2))
        return
    name = f" {safe_text(view.name)!r}" if view.name else ""
    # The progress names the state itself when the workflow cannot go on as it should ("blocked: ...").
    moving = view.state in ("running", "succeeded")
    click.echo(f"{view.kind} {view.id}{name}: {view.state + ', ' if moving else ''}{view.progress}")
    if view.policy:
        click.echo(f"policy: {view.policy}")
    click.echo(f"created: {view.created_at}" + (f", completed: {view.completed_at}" if view.completed_at else ""))
    states = Counter(s.state for s in view.steps)
    click.echo("steps: " + (", ".join(f"{n} {s}" for s, n in states.most_common()) or "none"))
    if not view.steps:
        return
    click.echo(f"\n{'#':>5}  {'job':>10}  {'state':<10} {'stage':>5}  {'label':<24} {'waits for':<20} error")
    shown = view.steps if limit == 0 else view.steps[:limit]
    for s in shown:
        parents = ",".join(str(p) for p in s.parents)
        click.echo(f"{s.position:>5}  {s.id:>10}  {s.state:<10} {s.layer:>5}  {_cell(s.label, 24):<24} "
                   f"{_cell(parents, 20):<20} {_cell(s.error or '', 60)}")
    if len(shown) < len(view.steps):
        click.echo(f"... and {len(view.steps) - len(shown)} more steps (--limit 0 lists them all, --json too)")


@workflow.command("cancel")
@click.argument("workflow_id", type=JOB_ID)
@click.pass_obj
def cancel(ctx: Context, workflow_id: int) -> None:
    """Cancel every step of WORKFLOW_ID that has not started; running steps finish."""
    done = flows.cancel_workflow(ctx.app(), CLI, workflow_id)
    click.echo(f"workflow {workflow_id}: {done.cancelled} step(s) cancelled")
