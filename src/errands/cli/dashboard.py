"""``errands dashboard`` (serve it) and ``errands users`` (its accounts)."""

from __future__ import annotations

import click

from ..core.config import mask_url
from ..core.extras import require
from ..services import accounts
from .context import CLI, Context

IMPORT_MODULES: tuple[str | tuple[str, ...], ...] = ("starlette", "jinja2")
"""What importing ``errands.dashboard`` needs (``errands users`` asks for it too: accounts are the dashboard's)."""
SERVE_MODULES = (*IMPORT_MODULES, ("python_multipart", "multipart"), "uvicorn", "prometheus_client")
"""Everything ``errands[dashboard]`` installs for serving: also python-multipart (the login and every
form), uvicorn (the server) and prometheus_client (its /metrics).  Checked before anything starts,
so a missing one is a one-line error, not a traceback, nor a 500 at the first form or scrape."""


def require_dashboard(feature: str, modules: tuple[str | tuple[str, ...], ...] = SERVE_MODULES) -> None:
    """Refuse, naming the extra, when a module of ``errands[dashboard]`` cannot be imported."""
    for module in modules:
        require(module, "dashboard", feature)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="ERRANDS_DASHBOARD_HOST", show_envvar=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535),
              envvar="ERRANDS_DASHBOARD_PORT", show_envvar=True)
@click.option("--root-path", default="", envvar="ERRANDS_DASHBOARD_ROOT_PATH", show_envvar=True,
              help="URL prefix when served behind a proxy under a path, e.g. /errands.")
@click.option("--behind-host-auth", is_flag=True, envvar="ERRANDS_DASHBOARD_BEHIND_HOST_AUTH", show_envvar=True,
              help="Turn the dashboard's own login off: a proxy or the host application already authenticates "
                   "every request. Everyone who reaches it is an admin.")
@click.option("--insecure-cookies", is_flag=True, envvar="ERRANDS_DASHBOARD_INSECURE_COOKIES", show_envvar=True,
              help="Send cookies without the Secure flag (plain HTTP on a host other than localhost).")
@click.option("--forwarded-allow-ips", default=None, envvar="ERRANDS_DASHBOARD_FORWARDED_ALLOW_IPS",
              show_envvar=True, metavar="ADDRESSES",
              help="Trust X-Forwarded-For and X-Forwarded-Proto only from these proxy addresses (comma-separated "
                   "IPs or networks, e.g. 127.0.0.1 when the proxy runs on this host). Default: trust them from "
                   "nobody, so the login limits and the audit log see the connecting address.")
@click.option("--api-limits", default=None, envvar="ERRANDS_DASHBOARD_API_LIMITS", show_envvar=True,
              metavar="LIMITS",
              help="Request limits of the JSON API, per user and per address, e.g. "
                   "'enqueue=30/minute,reads_per_address=none' (names: enqueue, actions, reads, each also "
                   "with _per_address; unnamed ones keep their defaults: enqueue 120/minute, actions "
                   "120/minute, reads 1200/minute per user, twice that per address).")
@click.pass_obj
def dashboard(ctx: Context, host: str, port: int, root_path: str, behind_host_auth: bool,
              insecure_cookies: bool, forwarded_allow_ips: str | None, api_limits: str | None) -> None:
    """Serve the web dashboard (needs errands[dashboard])."""
    require_dashboard("errands dashboard")
    import uvicorn

    from ..dashboard import ApiLimits, AuthSettings, create_dashboard

    limits = ApiLimits.from_text(api_limits)
    app = ctx.app(names_database=True)
    app.store.check()  # SQLite: creates the tables in an existing file; elsewhere a missing schema fails here
    web = create_dashboard(app, open_access=behind_host_auth, settings=AuthSettings(
        secure_cookies=not insecure_cookies), api_limits=limits)
    click.echo(f"errands dashboard: database {mask_url(app.database_url)}\n"
               f"  http://{host}:{port}{root_path}/" + (" (no login: --behind-host-auth)" if behind_host_auth else ""),
               err=True)
    # The alert thresholds: this process takes its turn too, so that a fleet whose every worker died
    # still hears about it (the no_worker alert), even with nobody looking at a page.
    loop = None
    if app.alert_thresholds.any:
        from ..services.alerts import AlertLoop

        loop = AlertLoop(app)
        loop.start()
    # Forwarded headers name the client the login limits count and the audit log records: trusted from
    # any local process (uvicorn's default, 127.0.0.1), they let one spray passwords past the per-address
    # limit through an SSH tunnel and write any address into the audit log.  Off unless the operator
    # names the proxies.
    trusted = (forwarded_allow_ips or "").strip()
    try:
        uvicorn.run(web, host=host, port=port, root_path=root_path, log_level="warning",
                    proxy_headers=bool(trusted), forwarded_allow_ips=trusted or None)
    finally:
        if loop is not None:
            loop.stop()


@click.group()
def users() -> None:
    """Dashboard accounts."""


def _change(ctx: Context, action: str, username: str, **details: str) -> None:
    # Accounts only matter to the dashboard: without its extra, ``errands users`` says so first.
    require_dashboard("errands users", IMPORT_MODULES)
    try:
        # The first account of a new deployment may come before anything else: "create" may create it.
        accounts.change_user(ctx.app(missing_ok=action == "create"), CLI, action, username, **details)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _new_password(password: str | None) -> str:
    require_dashboard("errands users", IMPORT_MODULES)  # before asking for a password it could not hash
    return password if password is not None else click.prompt("password", hide_input=True, confirmation_prompt=True)


@users.command("create")
@click.argument("username")
@click.option("--role", type=click.Choice(["admin", "viewer"]), default="viewer", show_default=True)
@click.option("--password", envvar="ERRANDS_NEW_PASSWORD", help="Default: asked for (not echoed).")
@click.pass_obj
def create(ctx: Context, username: str, role: str, password: str | None) -> None:
    """Create a dashboard user (the first one should be --role admin)."""
    _change(ctx, "create", username, role=role, password=_new_password(password))
    click.echo(f"created {role} {username}")


@users.command("list")
@click.pass_obj
def list_users(ctx: Context) -> None:
    """Every dashboard user."""
    for u in accounts.list_users(ctx.app()):
        click.echo(f"{u.username:<30} {u.role:<7} {'disabled' if u.disabled else 'active'}")


@users.command("disable")
@click.argument("username")
@click.pass_obj
def disable(ctx: Context, username: str) -> None:
    """Disable USERNAME and end its sessions."""
    _change(ctx, "disable", username)
    click.echo(f"disabled {username}")


@users.command("enable")
@click.argument("username")
@click.pass_obj
def enable(ctx: Context, username: str) -> None:
    """Let USERNAME log in again."""
    _change(ctx, "enable", username)
    click.echo(f"enabled {username}")


@users.command("passwd")
@click.argument("username")
@click.option("--password", envvar="ERRANDS_NEW_PASSWORD")
@click.pass_obj
def passwd(ctx: Context, username: str, password: str | None) -> None:
    """Set a new password for USERNAME (ends its sessions)."""
    _change(ctx, "password", username, password=_new_password(password))
    click.echo(f"password of {username} changed")
