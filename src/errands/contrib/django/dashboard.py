"""The errands dashboard in a Django project, behind Django's own logins.

Staff users read, superusers (or staff holding ``admin_permission``) act; everyone else is
sent to ``LOGIN_URL`` with ``?next=`` back to the page.  ASGI (``asgi.py``)::

    from django.core.asgi import get_asgi_application
    from errands.contrib.django.dashboard import with_dashboard

    application = with_dashboard(get_asgi_application(), "/errands")

WSGI (``wsgi.py``; a2wsgi runs the dashboard on an event loop thread of its own)::

    from django.core.wsgi import get_wsgi_application
    from errands.contrib.django.dashboard import with_dashboard_wsgi

    application = with_dashboard_wsgi(get_wsgi_application(), "/errands")

Who is asking comes from Django's session cookie, read the way Django's middleware reads it
(the ``SESSION_ENGINE``'s store, then ``django.contrib.auth.get_user``, which also checks the
session's password hash), in a worker thread since it queries the database.  Nothing a client
sends besides that cookie counts.  The gate (:class:`errands.contrib.asgi.DashboardGate`)
carries the answer to the dashboard inside the ASGI scope, and the dashboard keeps its own
protections: CSRF tokens on every change (a double-submit cookie), the strict CSP, admin-only
actions.  Requests under the mount path never reach Django's URLconf or middleware.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib import import_module
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.contrib.auth import get_user
from django.db import close_old_connections
from django.http import HttpRequest, QueryDict
from django.shortcuts import resolve_url

from ...core.extras import require
from ...dashboard import AuthSettings, Principal
from ..asgi import DashboardGate, check_mount_path, inner_path

__all__ = ["DjangoStaff", "dashboard", "with_dashboard", "with_dashboard_wsgi"]


class _SessionView:
    """A session's data as ``get_user`` reads it, with its writes kept in memory.

    ``get_user`` may rotate the session key (a session signed with a SECRET_KEY_FALLBACKS
    key) or flush it; the dashboard's response never carries Django's session cookie, so a
    rotation done here would log the user out of the site.  Django's own middleware does it
    on the user's next request to the site instead.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._data[key] = value

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def cycle_key(self) -> None:
        pass

    def flush(self) -> None:
        self._data.clear()


class DjangoStaff:
    """``auth(request)`` for the dashboard: the Django user behind the session cookie, as a
    :class:`~errands.dashboard.Principal`, or None for anyone who is not active staff.

    Role ``admin`` for superusers and for staff with ``admin_permission`` (e.g.
    ``"myapp.manage_jobs"``), ``viewer`` for other staff.
    """

    def __init__(self, admin_permission: str | None = None) -> None:
        self.admin_permission = admin_permission

    def __call__(self, request: Any) -> Principal | None:
        key = request.cookies.get(settings.SESSION_COOKIE_NAME)
        if not key:
            return None
        close_old_connections()  # what Django does when a request starts and ends
        try:
            store = import_module(settings.SESSION_ENGINE).SessionStore(key)
            host_request = HttpRequest()
            host_request.session = _SessionView(dict(store.items()))  # type: ignore[assignment]
            user = get_user(host_request)
            if not (user.is_authenticated and user.is_active and user.is_staff):
                return None
            admin = user.is_superuser or (self.admin_permission is not None
                                          and user.has_perm(self.admin_permission))
            return Principal(user.get_username(), "admin" if admin else "viewer")
        finally:
            close_old_connections()


def dashboard(backend: str = "default", *, path: str = "/errands", admin_permission: str | None = None,
              login_url: str | None = None, auth_settings: AuthSettings | None = None) -> DashboardGate:
    """The dashboard of TASKS[``backend``] as an ASGI app expecting to be mounted at ``path``.

    ``login_url``: a URL or URL name (default ``settings.LOGIN_URL``).  ``auth_settings``:
    cookie options; by default the CSRF cookie is ``Secure`` when Django's is
    (``CSRF_COOKIE_SECURE``) and scoped to the mount path.  A ``backend`` that is not an
    ``ErrandsBackend`` raises ``ImproperlyConfigured``.
    """
    check_mount_path(path)
    from .backend import errands_backend

    tasks_backend = errands_backend(backend)
    tasks_backend.discover()  # the enqueue form and the queue list name the project's tasks
    if auth_settings is None:
        script = (getattr(settings, "FORCE_SCRIPT_NAME", None) or "").rstrip("/")
        auth_settings = AuthSettings(secure_cookies=bool(settings.CSRF_COOKIE_SECURE), cookie_path=script + path)

    def login_target(request: Any) -> str:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return _with_next(resolve_url(login_url or settings.LOGIN_URL), here)

    return DashboardGate(tasks_backend.errands, DjangoStaff(admin_permission), login_url=login_target,
                         settings=auth_settings)


def _with_next(login: str, here: str) -> str:
    """``login`` with ``next=here`` in its query (what ``redirect_to_login`` builds)."""
    parts = list(urlsplit(login))
    query = QueryDict(parts[3], mutable=True)
    query["next"] = here
    parts[3] = query.urlencode(safe="/")
    return urlunsplit(parts)


class DashboardMount:
    """An ASGI app: requests under ``path`` go to the dashboard, all others to Django."""

    def __init__(self, django_app: Any, gate: Any, path: str) -> None:
        self.django_app = django_app
        self.gate = gate
        self.path = path

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            root, inner = scope.get("root_path", ""), inner_path(scope)
            if inner == self.path or inner.startswith(self.path + "/"):
                await self.gate({**scope, "root_path": root + self.path, "path": root + inner}, receive, send)
                return
        await self.django_app(scope, receive, send)


def with_dashboard(django_app: Any, path: str = "/errands", *, backend: str = "default",
                   admin_permission: str | None = None, login_url: str | None = None,
                   auth_settings: AuthSettings | None = None) -> DashboardMount:
    """Django's ASGI application with the dashboard at ``path`` (see :func:`dashboard`)."""
    gate = dashboard(backend, path=path, admin_permission=admin_permission, login_url=login_url,
                     auth_settings=auth_settings)
    return DashboardMount(django_app, gate, path)


def with_dashboard_wsgi(django_app: Callable[..., Iterable[bytes]], path: str = "/errands", *,
                        backend: str = "default", admin_permission: str | None = None, login_url: str | None = None,
                        auth_settings: AuthSettings | None = None) -> Callable[..., Iterable[bytes]]:
    """Django's WSGI application with the dashboard at ``path`` (needs a2wsgi)."""
    ASGIMiddleware = require("a2wsgi", "django", "with_dashboard_wsgi (the dashboard under WSGI)").ASGIMiddleware
    gate = dashboard(backend, path=path, admin_permission=admin_permission, login_url=login_url,
                     auth_settings=auth_settings)
    served = ASGIMiddleware(gate)  # type: ignore[arg-type]

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path_info = environ.get("PATH_INFO", "")
        if path_info != path and not path_info.startswith(path + "/"):
            return django_app(environ, start_response)
        environ = {**environ, "SCRIPT_NAME": environ.get("SCRIPT_NAME", "") + path,
                   "PATH_INFO": path_info[len(path):]}
        return served(environ, start_response)  # type: ignore[arg-type]

    return application
