"""``errands migrate`` and ``errands recover``."""

from __future__ import annotations

import sys

import click

from ..services.operator import recover_now
from .context import CLI, Context


@click.command()
@click.option("--sql", "print_sql", is_flag=True, help="Print the DDL instead of running it.")
@click.pass_obj
def migrate(ctx: Context, print_sql: bool) -> None:
    """Create or upgrade errands' tables (safe to run again)."""
    store = ctx.app(missing_ok=True).store  # creating the database is what it is for
    if print_sql:
        click.echo(store.migration_sql(), nl=False)
        return
    steps = store.pending_migration_steps()
    with click.progressbar(length=steps, label="migrating", file=sys.stderr) as bar:
        applied = store.migrate(progress=bar.update)
    click.echo(f"applied schema version(s) {', '.join(map(str, applied))}" if applied
               else f"schema already at version {store.dialect.schema_version}")


@click.command()
@click.pass_obj
def recover(ctx: Context) -> None:
    """Release jobs whose lease expired now (workers also do this on their own)."""
    report = recover_now(ctx.app(), CLI)
    click.echo(f"released {len(report.released)} stale job(s), moved {len(report.buried)} "
               "with no attempts left to the dead letter")
