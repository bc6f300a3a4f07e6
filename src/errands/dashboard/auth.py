"""Who is asking: the dashboard's own logins, or the host application's authentication.

Own logins: a session cookie holds a random token whose SHA-256 the database keeps,
with the session's CSRF token.  "Remember me" sets a second cookie ``selector:validator``;
the database keeps the validator's digest, and each use replaces the token (rotation).
Failed logins are counted per account and per client address in the database, so
every dashboard process sees the same limits.

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

from ..core.errors import StoreError
from . import passwords
from .security import digest, new_token, same

if TYPE_CHECKING:
    from ..app import Errands

SESSION_COOKIE = "errands_session"
REMEMBER_COOKIE = "errands_remember"
CSRF_COOKIE = "errands_csrf"
THEMES = ("auto", "light", "dark")


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
        return await run_in_threadpool(self._own_principal, conn)

    def _own_principal(self, conn: HTTPConnection
                       ) -> tuple[Principal | None, list[tuple[str, str, dict[str, Any]]]]:
        token = conn.cookies.get(SESSION_COOKIE)
        if token:
            session = self.app.store.accounts.get_session(digest(token))
            if session is not None:
                u = session.user
                return Principal(u.username, u.role, u.theme, session.csrf), []
        remembered = conn.cookies.get(REMEMBER_COOKIE)
        if remembered and ":" in remembered:
            selector, validator = remembered.split(":", 1)
            taken = self.app.store.accounts.take_remember(selector)
            if taken is not None and same(taken[0], digest(validator)):
                user = taken[1]
                return self._start(user.id, user.username, user.role, user.theme, remember=True)
            if taken is not None:
                # A validator that does not match a live selector: the token was stolen and used. End all.
                self.app.store.accounts.forget_remember_of(taken[1].id)
        return None, []

    def _start(self, user_id: int, username: str, role: str, theme: str, remember: bool
               ) -> tuple[Principal, list[tuple[str, str, dict[str, Any]]]]:
        token, csrf = new_token(), new_token()
        self.app.store.accounts.create_session(digest(token), user_id, csrf, self.settings.session_ttl)
        cookies = [(SESSION_COOKIE, token, {"max_age": int(self.settings.session_ttl)})]
        if remember:
            selector, validator = new_token(12), new_token()
            self.app.store.accounts.create_remember(selector, digest(validator), user_id, self.settings.remember_ttl)
            cookies.append((REMEMBER_COOKIE, f"{selector}:{validator}", {"max_age": int(self.settings.remember_ttl)}))
        return Principal(username, role, theme, csrf), cookies

    def login(self, username: str, password: str, address: str, remember: bool
              ) -> tuple[Principal | None, list[tuple[str, str, dict[str, Any]]], str]:
        """Check a password; returns (principal or None, cookies, message for the login form)."""
        store, s = self.app.store, self.settings
        if store.accounts.failed_logins(username=username, window=s.failure_window) >= s.max_failures_per_account or \
                store.accounts.failed_logins(ip=address, window=s.failure_window) >= s.max_failures_per_address:
            store.accounts.record_login(username, address, False)
            return None, [], "Too many failed attempts. Wait a few minutes and try again."
        user = store.accounts.get_user(username)
        if user is None or user.disabled:
            passwords.burn_time(password)
            ok = False
        else:
            ok = passwords.verify_password(password, user.password_hash)
        store.accounts.record_login(username, address, ok)
        if not ok or user is None:
            return None, [], "Wrong user name or password."
        principal, cookies = self._start(user.id, user.username, user.role, user.theme, remember)
        store.accounts.audit(user.username, "login", f"from {address}")
        return principal, cookies, ""

    def logout(self, conn: HTTPConnection, response: Response) -> None:
        token = conn.cookies.get(SESSION_COOKIE)
        if token:
            try:
                self.app.store.accounts.delete_session(digest(token))
            except StoreError:
                pass
        remembered = conn.cookies.get(REMEMBER_COOKIE)
        if remembered and ":" in remembered:
            try:
                self.app.store.accounts.take_remember(remembered.split(":", 1)[0])
            except StoreError:
                pass
        for name in (SESSION_COOKIE, REMEMBER_COOKIE):
            response.delete_cookie(name, path=self.settings.cookie_path, secure=self.settings.secure_cookies,
                                   httponly=True, samesite="lax")

    def set_cookies(self, response: Response, cookies: list[tuple[str, str, dict[str, Any]]]) -> None:
        for name, value, extra in cookies:
            response.set_cookie(name, value, path=self.settings.cookie_path, secure=self.settings.secure_cookies,
                                httponly=True, samesite="lax", **extra)

    def set_csrf_cookie(self, response: Response, token: str) -> None:
        """The double-submit CSRF token of host-authenticated dashboards (pages and /api/me show it)."""
        response.set_cookie(CSRF_COOKIE, token, path=self.settings.cookie_path,
                            secure=self.settings.secure_cookies, httponly=True, samesite="strict")
