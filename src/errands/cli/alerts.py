"""``errands alerts``: the alert thresholds crossed now, and an evaluation on demand (for cron)."""

from __future__ import annotations

import click

from ..services import alerts as alerting
from .context import Context

ALERT_CROSSED = 4
"""The exit status when an alert is crossed (for a cron job or a monitoring check)."""


@click.command()
@click.option("--evaluate", is_flag=True,
              help="Evaluate the app's thresholds now and deliver each change to its on_alert hooks (once "
                   "fleet-wide, as the workers do): from cron, where no worker or dashboard may be left to.")
@click.pass_obj
def alerts(ctx: Context, evaluate: bool) -> None:
    """The alerts crossed now (exit status 4 when any is), with --evaluate after evaluating."""
    app = ctx.app()
    if evaluate:
        changes = alerting.evaluate_now(app)
        for change in changes:
            click.echo(f"{'crossed' if change.crossed else 'cleared'}: {change.describe()}")
        for thread in alerting.delivering():
            thread.join(alerting.HOOK_TIMEOUT)
    crossed = alerting.crossed_alerts(app)
    for a in crossed:
        click.echo(f"ALERT {a.kind}{' ' + a.queue if a.queue else ''}: {a.message} (since {a.since})")
    if not crossed:
        click.echo("no alert is crossed")
    click.get_current_context().exit(ALERT_CROSSED if crossed else 0)
