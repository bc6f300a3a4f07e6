"""errands in a Flask application: the dashboard under a URL prefix, the host's own authentication,
an in-process worker, and JSON errors for refused enqueues.  Needs ``errands[flask]``.

::

    mount_dashboard(app, errands, "/errands", auth=who_is_asking, login_url=lambda: url_for("login"))
    start_worker(errands, concurrency=2)          # optional: run jobs in the web process

``auth()`` runs inside a Flask request context for the dashboard's request, so it can read
``flask.session``, flask-login's ``current_user`` and so on; it returns a
:class:`~errands.dashboard.Principal` or None.  The dashboard is an ASGI app: a2wsgi's
``ASGIMiddleware`` runs it (on an event loop thread of its own), and the answer travels in
the WSGI environ under a key no request header can produce (headers become ``HTTP_*``
keys), which a2wsgi hands on to the ASGI app with the scope.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..core.extras import MissingExtra

try:
    import jinja2  # noqa: F401  (the dashboard's templates)
    from a2wsgi import ASGIMiddleware
    from a2wsgi.asgi import build_scope
    from starlette.requests import Request
except ImportError as exc:
    raise MissingExtra("errands.contrib.flask", "flask", exc) from exc

from ..core.errors import ConfigurationError, EnqueueError, JobNotFound, StoreUnavailable
from ..dashboard import AuthSettings, Principal
from .asgi import PRINCIPAL_KEY, PUBLIC_PATHS, DashboardGate, check_mount_path, checked_principal
from .flask_run import start_worker
from .inprocess import InProcessWorker

if TYPE_CHECKING:
    from flask import Flask

    from ..app import Errands

__all__ = ["FlaskDashboard", "InProcessWorker", "Principal", "mount_dashboard", "register_error_handlers",
           "start_worker"]

LOGIN_KEY = "errands.login_url"
"""The environ entry with where to send a stranger, when ``login_url`` is a function (it runs inside
the Flask request context).  The host's answer travels under ``PRINCIPAL_KEY``, as in the scope."""


def _check_a2wsgi() -> None:
    """Refuse to start when a2wsgi does not hand the WSGI environ on: the principal would never arrive."""
    probe: dict[str, Any] = {"REQUEST_METHOD": "GET", "SERVER_NAME": "probe", "SERVER_PORT": "80"}
    try:
        carried = build_scope(probe).get("wsgi_environ")  # type: ignore[arg-type]
    except Exception:  # a changed signature is the same problem
        carried = None
    if carried is not probe:
        raise ConfigurationError("this a2wsgi version does not pass the WSGI environ to the ASGI app "
                                 "(scope['wsgi_environ']); the dashboard could not learn who is signed in")


def _environ(request: Request) -> dict[str, Any]:
    environ = request.scope.get("wsgi_environ")
    return environ if isinstance(environ, dict) else {}


async def _principal_from_environ(request: Request) -> Principal | None:
    found = _environ(request).get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else None


def _login_from_environ(request: Request) -> str | None:
    found = _environ(request).get(LOGIN_KEY)
    return found if isinstance(found, str) else None


class FlaskDashboard:
    """The dashboard in a Flask app's WSGI pipeline (what :func:`mount_dashboard` returns).

    Requests under the prefix never reach Flask's views; everything else passes through
    untouched.  :meth:`close` stops the event loop thread that serves the dashboard.
    """

    def __init__(self, flask_app: Flask, errands_app: Errands, path: str, auth: Callable[[], Principal | None], *,
                 login_url: str | Callable[[], str | None] | None = None,
                 settings: AuthSettings | None = None) -> None:
        _check_a2wsgi()
        self.flask_app = flask_app
        self.path = check_mount_path(path)
        self.auth = auth
        self.login_url = login_url
        self.gate = DashboardGate(errands_app, _principal_from_environ, settings=settings,
                                  login_url=_login_from_environ if callable(login_url) else login_url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="errands-dashboard-loop", daemon=True)
        self._thread.start()
        self._asgi = ASGIMiddleware(self.gate, loop=self._loop)  # type: ignore[arg-type]
        self._inner = flask_app.wsgi_app
        flask_app.wsgi_app = self  # type: ignore[method-assign]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        script, path_info = environ.get("SCRIPT_NAME", ""), environ.get("PATH_INFO", "")
        if path_info != self.path and not path_info.startswith(self.path + "/"):
            return self._inner(environ, start_response)
        rest = path_info[len(self.path):]
        environ = dict(environ)
        if rest in PUBLIC_PATHS or rest.startswith("/static/"):
            environ[PRINCIPAL_KEY] = None
        else:
            # The host's view of this request: the original path, its session, its login manager.
            with self.flask_app.request_context(environ):
                environ[PRINCIPAL_KEY] = checked_principal(self.auth())
                if environ[PRINCIPAL_KEY] is None and callable(self.login_url):
                    environ[LOGIN_KEY] = self.login_url()
        environ["SCRIPT_NAME"], environ["PATH_INFO"] = script + self.path, rest
        return self._asgi(environ, start_response)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop the dashboard's event loop (the Flask app keeps serving its own views)."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._loop.is_running():
            self._loop.close()


def mount_dashboard(flask_app: Flask, errands_app: Errands, path: str = "/errands", *,
                    auth: Callable[[], Principal | None], login_url: str | Callable[[], str | None] | None = None,
                    settings: AuthSettings | None = None) -> FlaskDashboard:
    """Serve the dashboard at ``path`` of ``flask_app``, behind the host's ``auth``.

    ``auth()`` runs in a Flask request context and returns ``Principal(username, "admin" |
    "viewer")`` or None.  ``login_url``: where pages send a stranger; a string gets
    ``?next=<this page>`` appended, a function is called in the request context (so
    ``url_for("login", next=request.full_path)`` works).  Without it strangers get a 401 page.
    ``settings``: cookie options (``secure_cookies=False`` for plain-HTTP development).
    """
    return FlaskDashboard(flask_app, errands_app, path, auth, login_url=login_url, settings=settings)


def register_error_handlers(flask_app: Flask) -> None:
    """Answer refused enqueues with 400, unknown job ids with 404, a database outage with 503 (JSON)."""

    def refused(exc: Exception) -> Any:
        return {"error": str(exc), "type": type(exc).__name__}, 400

    def not_found(exc: Exception) -> Any:
        return {"error": str(exc)}, 404

    def unavailable(exc: Exception) -> Any:
        return {"error": "the job database is unavailable; try again in a moment"}, 503, {"Retry-After": "5"}

    flask_app.register_error_handler(EnqueueError, refused)
    flask_app.register_error_handler(JobNotFound, not_found)
    flask_app.register_error_handler(StoreUnavailable, unavailable)
