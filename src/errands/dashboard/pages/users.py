"""Dashboard accounts (admins only): list, create, disable, enable, new password."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...core.errors import ErrandsError
from ...core.payload import safe_text
from ...services import accounts
from ...services.models import UserView
from ..auth import Principal
from ..rendering import Dashboard


async def _users(d: Dashboard, search: str | None = None) -> list[UserView]:
    """The accounts to list: none when the host signs people in (it has the accounts)."""
    return await run_in_threadpool(accounts.list_users, d.app, search) if d.auth.own_logins else []


async def users_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """The accounts, filtered by name."""
    if not user.is_admin:
        return d.render(request, "error.html", user, status=403, message="this needs the admin role")
    search = safe_text(request.query_params.get("q", ""), 100)
    return d.render(request, "users.html", user, users=await _users(d, search or None), search=search,
                    roles=accounts.ROLES, own_logins=d.auth.own_logins)


async def users_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """One change to an account; on a refusal, the list again with the reason."""
    form = await request.form()
    action = request.path_params.get("action", "create")
    username = str(form.get("username", "")).strip()[:100]
    try:
        if action not in accounts.ACTIONS:
            raise HTTPException(404)
        await run_in_threadpool(accounts.change_user, d.app, user.username, action, username,
                                role=str(form.get("role", "viewer")), password=str(form.get("password", "")))
    except (ValueError, ErrandsError) as exc:
        users = await run_in_threadpool(accounts.list_users, d.app)
        return d.render(request, "users.html", user, status=400, users=users, search="",
                        roles=accounts.ROLES, own_logins=d.auth.own_logins, error=str(exc))
    return RedirectResponse(d.url(request, "/users", done=f"{action}:{username}"), status_code=303)
