"""Who is asking: the dashboard's own logins, or the host application's authentication.

Own logins: the accounts, sessions, remember-me tokens and login limits are
:mod:`errands.services.sessions`; this module turns them into cookies and principals.

Host authentication (``create_dashboard(app, host_auth=...)``): the host says who the
user is, and CSRF uses a double-submit cookie instead of the session row.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.responses import Response

from ..services import accounts, sessions

if TYPE_CHECKING:
    from ..app import Errands

SESSION_COOKIE = "errands_session"
REMEMBER_COOKIE = "errands_remember"
CSRF_COOKIE = "errands_csrf"
THEMES = accounts.THEMES


@dataclass(frozen=True)
class Principal:
    username: str
    role: str
    theme: str = "auto"
    csrf: str = ""
    host: bool = False
    """Authenticated by the host application (no password, no session row)."""

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


HostAuth = Callable[[HTTPConnection], "Principal | None | Awaitable[Principal | None]"]


@dataclass
class AuthSettings:
    session_ttl: float = 8 * 3600.0
    remember_ttl: float = 30 * 86400.0
    max_failures_per_account: int = 5
    max_failures_per_address: int = 20
    failure_window: float = 15 * 60.0
    remember_reuse_grace: float = 10.0
    """Seconds after a remember-me token's use during which a second use of it (a restored browser's
    parallel tabs) signs nobody in but is not taken for a theft; later, a reuse ends every session."""
    secure_cookies: bool = True
    cookie_path: str = "/"


class Authenticator:
    def __init__(self, app: Errands, settings: AuthSettings, host_auth: HostAuth | None = None,
                 open_access: bool = False) -> None:
        self.app = app
        self.settings = settings
        self.host_auth = host_auth
        self.open_access = open_access
        """No authentication at all: only when told explicitly that the host guards access."""

    @property
    def own_logins(self) -> bool:
        return self.host_auth is None and not self.open_access

    async def principal(self, conn: HTTPConnection) -> tuple[Principal | None, list[tuple[str, str, dict[str, Any]]]]:
        """The user behind a request, and cookies to set (a rotated remember-me token)."""
        if self.open_access:
            return Principal("operator (host-guarded)", "admin", csrf=conn.cookies.get(CSRF_COOKIE, ""),
                             host=True), []
        if self.host_auth is not None:
            found = self.host_auth(conn)
            if inspect.isawaitable(found):
                found = await found
            if found is None:
                return None, []
            return Principal(found.username, found.role, found.theme, conn.cookies.get(CSRF_COOKIE, ""), True), []
        # Database reads block: they run in a worker thread so one slow query never stalls other requests.
        return await run_in_threadpool(self.own_principal, conn)

    def own_principal(self, conn: HTTPConnection
                      ) -> tuple[Principal | None, list[tuple[str, str, dict[str, Any]]]]:
        """The own-logins user behind a request (blocking: call it in a worker thread)."""
        signed = sessions.current(self.app, conn.cookies.get(SESSION_COOKIE), conn.cookies.get(REMEMBER_COOKIE),
                                  self.settings, conn.client.host if conn.client else "unknown")
        if signed is None:
            return None, []
        return Principal(signed.username, signed.role, signed.theme, signed.csrf), self._cookies(signed)

    def _cookies(self, signed: sessions.SignedIn) -> list[tuple[str, str, dict[str, Any]]]:
        """The cookies a new session sets: the session's token, and the remember-me token if any."""
        cookies = []
        if signed.session_token:
            cookies.append((SESSION_COOKIE, signed.session_token, {"max_age": int(self.settings.session_ttl)}))
        if signed.remember_token:
            cookies.append((REMEMBER_COOKIE, signed.remember_token, {"max_age": int(self.settings.remember_ttl)}))
        return cookies

    def login(self, username: str, password: str, address: str, remember: bool
              ) -> tuple[Principal | None, list[tuple[str, str, dict[str, Any]]], str]:
        """Check a password; returns (principal or None, cookies, message for the login form)."""
        signed, message = sessions.sign_in(self.app, username, password, address, remember, self.settings)
        if signed is None:
            return None, [], message
        return Principal(signed.username, signed.role, signed.theme, signed.csrf), self._cookies(signed), ""

    def logout(self, conn: HTTPConnection, response: Response) -> None:
        sessions.sign_out(self.app, conn.cookies.get(SESSION_COOKIE), conn.cookies.get(REMEMBER_COOKIE))
        for name in (SESSION_COOKIE, REMEMBER_COOKIE):
            response.delete_cookie(name, path=self.settings.cookie_path, secure=self.settings.secure_cookies,
                                   httponly=True, samesite="lax")

    def set_cookies(self, response: Response, cookies: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Set the cookies of a new session on ``response``: whatever it is, an error included (a
        remember-me token was used up to make that session, so its replacement must reach the browser)."""
        for name, value, extra in cookies:
            response.set_cookie(name, value, path=self.settings.cookie_path, secure=self.settings.secure_cookies,
                                httponly=True, samesite="lax", **extra)

    def set_csrf_cookie(self, response: Response, token: str) -> None:
        """The double-submit CSRF token of host-authenticated dashboards (pages and /api/me show it)."""
        response.set_cookie(CSRF_COOKIE, token, path=self.settings.cookie_path,
                            secure=self.settings.secure_cookies, httponly=True, samesite="strict")
