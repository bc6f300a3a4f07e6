"""``errands doctor``: one line per check, the fix under anything that needs it, exit 1 on a failure.

Every line starts with a symbol and a word (``✓ ok``, ``i info``, ``! warn``, ``✗ FAIL``),
so the report reads the same without colour, in a log file or a screen reader; colour
is only added on a terminal.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys

import click

from ..core.config import mask_url
from ..core.errors import ErrandsError
from ..diagnostics import Check, Report, Status, diagnose
from .context import Context

TITLES = {
    "connectivity": "connectivity", "server": "server version", "schema_version": "schema version",
    "schema_drift": "schema drift", "claim_index": "claim index", "claim_mode": "claim mode",
    "sqlite_journal": "journal mode", "sqlite_busy_timeout": "busy_timeout",
    "sqlite_synchronous": "synchronous", "postgres_autovacuum": "autovacuum",
    "postgres_replication": "replication", "postgres_pooler": "connection pooler", "postgres_wakeup": "worker wake-up",
    "mysql_isolation": "isolation level", "mysql_time_zone": "session time zone", "mysql_engine": "storage engine",
    "clock_skew": "clock skew", "jobs_table": "jobs table size",
    "open_transactions": "open transactions", "workers": "workers", "app": "app",
}
_MARKS = {Status.OK: ("✓", "+", "ok", "green"), Status.INFO: ("i", "i", "info", "blue"),
          Status.WARN: ("!", "!", "warn", "yellow"), Status.FAIL: ("✗", "x", "FAIL", "red")}
_INDENT = " " * 9


def _unicode_ok() -> bool:
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "✓✗".encode(encoding)
    except (LookupError, UnicodeEncodeError):
        return False
    return True


def render(report: Report, *, unicode: bool = True) -> str:
    """The report as text.  Marks carry ANSI colour, which ``click.echo`` removes unless the
    output is a terminal."""
    lines = [f"errands doctor: {report.database} ({report.dialect})"]
    for check in report.checks:
        lines.extend(_check_lines(check, unicode))
    lines.append(_verdict(report))
    return "\n".join(lines)


def _check_lines(check: Check, unicode: bool) -> list[str]:
    fancy, plain, word, colour = _MARKS[check.status]
    mark = click.style(f"{fancy if unicode else plain} {word:<5}", fg=colour, bold=check.status is Status.FAIL)
    title = TITLES.get(check.name, check.name.replace("_", " "))
    out = [f"{mark} {title:<18} {check.detail}"]
    out += [f"{_INDENT}- {item}" for item in check.items]
    if check.fix and check.status in (Status.WARN, Status.FAIL):
        first, *rest = check.fix.splitlines()
        out.append(f"{_INDENT}fix: {first}")
        out += [f"{_INDENT}     {line}" for line in rest]
    return out


def _verdict(report: Report) -> str:
    failed = report.needs_action
    if failed:
        names = ", ".join(TITLES.get(c.name, c.name) for c in failed)
        verb = "need" if len(failed) > 1 else "needs"
        return f"{len(failed)} check{'s' if len(failed) > 1 else ''} {verb} action: {names} (exit code 1)"
    warnings = [c for c in report.checks if c.status is Status.WARN]
    if warnings:
        return (f"nothing needs action; {len(warnings)} warning{'s' if len(warnings) > 1 else ''} to look at "
                "when you can (exit code 0)")
    return "nothing needs action (exit code 0)"


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object: {database, dialect, exit_code, "
              "needs_action: [names], checks: [{name, status, detail, fix, items, data}]}.")
@click.pass_obj
def doctor(ctx: Context, as_json: bool) -> None:
    """Diagnose this deployment's database, schema, settings, clock and workers.

    Prints one line per check (ok, info, warn, FAIL) and the fix under each warning and
    failure. Exits 1 when any check failed (it needs action, even an unreachable
    database), 0 otherwise: warnings alone do not fail it.
    """
    try:
        app = ctx.app(missing_ok=True, names_database=True)  # (a missing SQLite file is a check of its own)
    except ErrandsError as exc:
        report = Report(mask_url(ctx.database_url or "(the app's)"), "unknown")
        report.add(Check("app", Status.FAIL, f"cannot load the app: {exc}",
                         fix="check --app / ERRANDS_APP (module:attribute, importable from this directory)"))
    else:
        # The connection pool logs each failed connect; the report says it once, with the cause and fix.
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        try:
            report = diagnose(app)
        finally:
            with contextlib.suppress(ErrandsError):
                app.store.close()
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2, default=str))
    else:
        click.echo(render(report, unicode=_unicode_ok()))
    sys.exit(report.exit_code)
