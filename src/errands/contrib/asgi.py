"""errands in a Starlette or FastAPI application: the dashboard under a path, the host's own
authentication, an in-process worker for the lifespan, and HTTP errors for refused enqueues.

::

    api = FastAPI(lifespan=errands_lifespan(errands, concurrency=4))
    mount_dashboard(api, errands, "/errands", auth=who_is_asking, login_url="/login")

The host decides who is asking: ``auth(request)`` (sync or async) returns a
:class:`~errands.dashboard.Principal` (a name and the role ``"admin"`` or ``"viewer"``) or None.
Its answer travels to the dashboard inside the ASGI scope, which only server-side code can
write; no header or cookie a client sends can stand in for it.  The dashboard keeps its
own protections: the strict CSP and other headers, CSRF tokens on every change (a
double-submit cookie here), admin-only actions, and links that carry the mount path.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlencode

from ..core.extras import MissingExtra

try:
    import jinja2  # noqa: F401  (the dashboard's templates)
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse, RedirectResponse, Response
except ImportError as exc:
    raise MissingExtra("errands.contrib.asgi", "dashboard", exc) from exc

from ..core.errors import ConfigurationError, EnqueueError, JobNotFound, StoreUnavailable
from ..dashboard import AuthSettings, Principal, create_dashboard
from ..dashboard.security import SecurityHeaders
from ..services.accounts import ROLES
from .inprocess import InProcessWorker

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.types import Receive, Scope, Send
    from typing_extensions import Unpack

    from ..app import Errands
    from ..worker.settings import WorkerOptions

__all__ = ["DashboardGate", "ErrandsLifespan", "Principal", "add_exception_handlers", "errands_lifespan",
           "mount_dashboard"]

PRINCIPAL_KEY = "errands.principal"
"""The scope entry that carries the host's answer to the dashboard (server-side only)."""
PUBLIC_PATHS = ("/healthz", "/api/openapi.json")
"""Paths inside the dashboard that need nobody (besides /static/): they show no job data."""

HostAuthFunction = Callable[[Request], "Principal | None | Awaitable[Principal | None]"]


def checked_principal(found: object) -> Principal | None:
    """The host's answer, refused loudly when it is not a Principal with a known role."""
    if found is None:
        return None
    if not isinstance(found, Principal):
        raise ConfigurationError(f"the dashboard's auth function must return errands.dashboard.Principal or None, "
                                 f"not {type(found).__name__}")
    if found.role not in ROLES:
        raise ConfigurationError(f"unknown dashboard role {found.role!r}: use one of {', '.join(ROLES)}")
    return found


def check_mount_path(path: str) -> str:
    """A mount path as every host mounts it: ``/errands``, not ``errands`` or ``/errands/``."""
    if not path.startswith("/") or path.endswith("/"):
        raise ConfigurationError(f"mount path must start with '/' and not end with one, got {path!r}")
    return path


def inner_path(scope: Scope) -> str:
    """The path inside the mount (the scope's path keeps the prefix; root_path names it)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


def _from_scope(conn: Any) -> Principal | None:
    """The dashboard's ``host_auth``: read what the gate put in the scope (and nothing else)."""
    found = conn.scope.get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else None


class DashboardGate:
    """An ASGI app in front of a host-authenticated dashboard.

    It asks the host who is asking and hands the answer to the dashboard in the scope.  A
    stranger's page request goes to the host's login page when there is one; everything else
    (the API's 401, a 401 page, the CSRF cookie, the security headers) is the dashboard's own.
    """

    def __init__(self, errands_app: Errands, resolve: HostAuthFunction, *,
                 login_url: str | Callable[[Request], str | None] | None = None,
                 settings: AuthSettings | None = None) -> None:
        self.dashboard = create_dashboard(errands_app, host_auth=_from_scope, settings=settings)
        self._resolve = resolve
        self._async = inspect.iscoroutinefunction(resolve) or inspect.iscoroutinefunction(type(resolve).__call__)
        self._login_url = login_url

    async def principal(self, request: Request) -> Principal | None:
        """The host's answer for this request (a sync function runs in a worker thread, since it
        may well read a session store)."""
        if self._async:
            found = await self._resolve(request)  # type: ignore[misc]
        else:
            found = await run_in_threadpool(self._resolve, request)
            if inspect.isawaitable(found):
                found = await found
        return checked_principal(found)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.dashboard(scope, receive, send)
            return
        path = inner_path(scope)
        if path in PUBLIC_PATHS or path.startswith("/static/"):
            await self.dashboard({**scope, PRINCIPAL_KEY: None}, receive, send)
            return
        request = Request(scope, receive)
        principal = await self.principal(request)
        if principal is None and request.method in ("GET", "HEAD") and not path.startswith("/api/") \
                and path != "/metrics":
            target = self._login_target(request)
            if target:
                await SecurityHeaders(RedirectResponse(target, status_code=303))(cast("dict[str, Any]", scope),
                                                                                 receive, send)
                return
        # Strangers otherwise get the dashboard's own refusal (401 JSON for the API, a 401 page).
        await self.dashboard({**scope, PRINCIPAL_KEY: principal}, receive, send)

    def _login_target(self, request: Request) -> str | None:
        login = self._login_url
        if login is None:
            return None
        if callable(login):
            return login(request)
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return f"{login}{'&' if '?' in login else '?'}{urlencode({'next': here}, quote_via=quote)}"


def mount_dashboard(host_app: Starlette, errands_app: Errands, path: str = "/errands", *, auth: HostAuthFunction,
                    login_url: str | Callable[[Request], str | None] | None = None,
                    settings: AuthSettings | None = None, name: str = "errands") -> DashboardGate:
    """Mount the dashboard at ``path`` of a Starlette or FastAPI app, behind the host's ``auth``.

    ``auth(request)`` returns ``Principal(username, "admin" | "viewer")`` or None (sync or
    async; a sync one runs in a worker thread).  It sees the host's middleware results, e.g.
    ``request.session``.  ``login_url``: where pages send a stranger, with ``?next=<this page>``
    appended (or a function of the request giving the whole URL); without it they answer 401.
    ``settings``: cookie options (``secure_cookies=False`` for plain-HTTP development).
    """
    gate = DashboardGate(errands_app, auth, login_url=login_url, settings=settings)
    host_app.mount(check_mount_path(path), gate, name=name)
    return gate


class ErrandsLifespan:
    """A lifespan that runs an :class:`~errands.contrib.inprocess.InProcessWorker` while the app serves.

    Around your own lifespan (``lifespan=``): yours starts first and stops last, so the jobs
    may use what it sets up; its state is passed on unchanged.  ``worker`` is the running
    worker (None outside the lifespan).  ``options``: the worker's options, as
    :class:`~errands.contrib.inprocess.InProcessWorker` takes them.
    """

    def __init__(self, errands_app: Errands, queues: Sequence[str] | None = None, *,
                 lifespan: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] | None = None,
                 **options: Unpack[WorkerOptions]) -> None:
        self.lifespan = lifespan
        self._new_worker = functools.partial(InProcessWorker, errands_app, queues, **options)
        self._new_worker()  # bad options fail here, where the app is built, not at start-up
        self.worker: InProcessWorker | None = None

    def __call__(self, app: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._running(app)

    @contextlib.asynccontextmanager
    async def _running(self, app: Any) -> AsyncIterator[Any]:
        outer = self.lifespan(app) if self.lifespan is not None else contextlib.nullcontext()
        async with outer as state:
            worker = self._new_worker()
            await run_in_threadpool(worker.start)
            self.worker = worker
            try:
                yield state
            finally:
                try:
                    await worker.astop()
                finally:
                    self.worker = None


def errands_lifespan(errands_app: Errands, queues: Sequence[str] | None = None, *,
                     lifespan: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] | None = None,
                     **options: Unpack[WorkerOptions]) -> ErrandsLifespan:
    """``FastAPI(lifespan=errands_lifespan(errands, concurrency=4))``: a worker in the app's process.

    On shutdown running jobs get ``shutdown_timeout`` seconds to finish; the rest go back to
    the queue (attempt refunded), so the server's shutdown waits at most that long (plus
    a few seconds to write the releases).  One worker per server process: ``--workers 4``
    means four.
    """
    return ErrandsLifespan(errands_app, queues, lifespan=lifespan, **options)


def add_exception_handlers(host_app: Starlette) -> None:
    """Answer refused enqueues with 400, unknown jobs ids with 404, a database outage with 503 (JSON)."""

    async def refused(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": str(exc), "type": type(exc).__name__}, status_code=400)

    async def not_found(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": str(exc)}, status_code=404)

    async def unavailable(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "the job database is unavailable; try again in a moment"}, status_code=503,
                            headers={"Retry-After": "5"})

    host_app.add_exception_handler(EnqueueError, refused)
    host_app.add_exception_handler(JobNotFound, not_found)
    host_app.add_exception_handler(StoreUnavailable, unavailable)
