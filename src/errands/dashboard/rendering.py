"""The dashboard's shared state and how pages are drawn: the Jinja environment (with filters that
print whatever a row holds), :class:`Dashboard` (the app, the authenticator, ``render`` and ``url``)
and the JSON response every API answer and error uses."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from jinja2.filters import do_urlencode
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.responses import JSONResponse as _StarletteJSONResponse

from ..core.config import check_queue_name
from ..core.errors import InvalidQueueName, StoreError
from ..core.limits import MAX_DELAY
from ..core.payload import safe_text
from ..services.alerts import AlertClock, crossed_alerts, evaluate_in_background
from ..services.models import AlertView, ReadsView
from ..services.operator import displayable, reads_view
from .auth import Authenticator, Principal
from .charts import throughput_chart
from .limits import ApiLimits, RequestLimiter
from .readcache import DEFAULT_TTL, LIVE_HEADER, Cached, ReadModelCache, uncached

if TYPE_CHECKING:
    from ..app import Errands

HERE = Path(__file__).parent
T = TypeVar("T")


class JSONResponse(_StarletteJSONResponse):
    """Every JSON response of the dashboard: whatever a row held (text that is no UTF-8, a NaN),
    the answer is valid JSON in UTF-8.  The usual rendering first; only when it fails, again with
    every string passed through :func:`safe_text` and every non-finite float spelled as text."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except ValueError:  # UnicodeEncodeError (lone surrogates), or NaN / infinity
            return super().render(displayable(content))


HIDDEN = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
                    "\u3164\ufeff\uffa0\ufff9-\ufffb\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
                    "\U000e0000-\U000e007f]")
"""Characters that change how text around them reads but show nothing themselves: the bidirectional
controls (U+202E makes "\u202egnp.exe" read "exe.png"), zero-width spaces and joiners, the soft
hyphen, word joiners and invisible operators, the byte-order mark, fillers and tag characters.  A
job name, an argument, an error or a user name holding one is printed with it spelled out."""


def visible(text: str) -> str:
    """``text`` with every :data:`HIDDEN` character spelled as ``\\u202e`` (``\\U000e0041`` beyond
    the BMP), the way JSON and Python write them: "\u202egnp.exe" prints as ``\\u202egnp.exe``.
    (An emoji joined by U+200D shows its parts and the joiner: this is an operator's panel.)"""
    return HIDDEN.sub(lambda m: f"\\u{ord(m[0]):04x}" if ord(m[0]) <= 0xFFFF else f"\\U{ord(m[0]):08x}", text)


class Drawn(Markup):
    """HTML this environment drew itself (a fragment of a cached read model, :mod:`.readcache`): every
    value in it went through :func:`_finalize` as it was drawn, so printing it again needs no second
    pass over what may be thirty kilobytes of rows."""

    __slots__ = ()


def _finalize(value: Any) -> Any:
    """What every ``{{ ... }}`` of a template prints: text made safe to encode as UTF-8, its hidden
    characters spelled out (:func:`visible`); markup, already escaped, stays markup (the spelling
    adds no character HTML gives a meaning to, so that holds in an attribute too)."""
    if isinstance(value, str):
        if isinstance(value, Drawn) or value.isascii():  # ASCII: no hidden character, no lone surrogate
            return value
        clean = visible(safe_text(value))
        return Markup(clean) if isinstance(value, Markup) else clean
    return value


def _urlencode(value: Any) -> str:
    """Jinja's ``urlencode``, for text that may hold lone surrogates (which it cannot encode)."""
    return do_urlencode(displayable(value))


def _segment(value: Any) -> str:
    """``value`` quoted as one segment of a URL path: "/" and "?" included."""
    return quote(safe_text(value), safe="")


def _valid_queue_name(name: Any) -> bool:
    """Whether a queue name can go into a URL the dashboard serves (a pause button needs one)."""
    try:
        check_queue_name(name)
    except InvalidQueueName:
        return False
    return True


def _duration(seconds: float | None) -> str:
    """Seconds for people: "—", "12 s", "3.5 min", "2.0 h", "1.2 d"."""
    if seconds is None:
        return "—"
    seconds = float(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


LIST_CLIP = 200
"""Characters of arguments a list shows per row (of an error: :data:`ERROR_CLIP`); the job's page shows
them all."""
ERROR_CLIP = 300
DETAIL_CLIP = 10_000
"""Characters of arguments, errors or a result the job's page shows before its "Show all" link."""


def _json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON that people read: real characters (Jinja's ``tojson`` writes ``<`` as
    ``\\u003c`` for use inside a script, which no page here does); autoescaping makes it safe in
    HTML, and the finalizer still spells out bidirectional and invisible characters (:func:`visible`)."""
    try:
        return json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    except ValueError:  # NaN or an infinity a row written by hand holds
        return json.dumps(displayable(value), indent=indent, ensure_ascii=False, default=str)


def _clip(text: Any, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with "…" when something was cut."""
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + "…"


def environment() -> Environment:
    """The templates' environment: autoescaped, and every printed value safe to encode."""
    # auto_reload=False: the templates ship with the package and never change under a running server;
    # Jinja would otherwise look at each template file's modification time on every page it draws.
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True, finalize=_finalize, auto_reload=False)
    env.filters["urlencode"] = _urlencode
    env.filters["segment"] = _segment
    env.tests["queue_name"] = _valid_queue_name
    env.globals["max_delay"] = int(MAX_DELAY)
    env.filters["tojson_pretty"] = lambda v: _json_text(v, indent=2)
    env.filters["json_text"] = _json_text
    env.filters["clip"] = _clip
    env.globals.update(list_clip=LIST_CLIP, error_clip=ERROR_CLIP, detail_clip=DETAIL_CLIP)
    env.filters["number"] = lambda v: f"{v:,}" if isinstance(v, int) else v
    env.filters["duration"] = _duration
    env.globals["throughput_chart"] = throughput_chart
    return env


class Dashboard:
    """What every handler needs: the app, who is asking (the authenticator) and how to draw a page."""

    def __init__(self, app: Errands, auth: Authenticator, tracebacks_for: str = "admins",
                 cache_seconds: float = DEFAULT_TTL) -> None:
        self.app = app
        self.auth = auth
        self.env = environment()
        self.tracebacks_for = tracebacks_for
        """Who sees kept tracebacks: "admins" (the default) or "everyone" signed in."""
        self.limiter = RequestLimiter(ApiLimits())
        """The JSON API's request limits (``create_dashboard(api_limits=...)``)."""
        thresholds = app.alert_thresholds
        self.alert_clock = AlertClock(thresholds.every) if thresholds.any else None
        """When this process next takes its turn at evaluating the alerts, as it serves a request."""
        self.read_cache = ReadModelCache(cache_seconds)
        """The read models everyone shares for a second (:mod:`.readcache`)."""

    async def read_model(self, request: Request, key: Hashable, load: Callable[[], T]) -> Cached[T]:
        """``load()`` (blocking: it runs in a worker thread) shared with everyone asking at the same
        time (a page's own refresh, ``X-Errands-Live``, may get a model a second old); read alone
        for a browser that has just changed something (``request.state.own_writes``, set by the
        guards) or when the cache is off."""
        if not self.read_cache.enabled or getattr(request.state, "own_writes", False):
            return await uncached(load)
        return await self.read_cache.get(key, load, live=LIVE_HEADER in request.headers)

    def alerts_for_page(self) -> list[AlertView]:
        """The alerts crossed now, for a page's banners (blocking: call it in a worker thread); an
        evaluation in the background when this process's turn may have come.  A database that fails
        here shows no banner: the page itself reports it."""
        if self.alert_clock is not None and self.alert_clock.due():
            evaluate_in_background(self.app)
        try:
            return crossed_alerts(self.app)
        except StoreError:
            return []

    def reads_for_page(self) -> ReadsView | None:
        """Where the page's lists and figures are read from, for its closing line (None: no read replica;
        blocking, as it may look at the replica: call it in a worker thread)."""
        return reads_view(self.app)

    def shows_tracebacks(self, principal: Principal | None) -> bool:
        return self.tracebacks_for == "everyone" or (principal is not None and principal.is_admin)

    def render(self, request: Request, template: str, principal: Principal | None, status: int = 200,
               cookies: list[Any] | None = None, **context: Any) -> HTMLResponse:
        """A page: ``template`` with the user, the mount's root path, the CSRF token and the query."""
        root = request.scope.get("root_path", "")
        html = self.env.get_template(template).render(
            request=request, user=principal, root=root, path=request.url.path[len(root):] or "/",
            csrf=principal.csrf if principal else "", query=dict(request.query_params),
            alerts=getattr(request.state, "alerts", ()) if principal else (),
            reads=getattr(request.state, "reads", None) if principal else None, **context)
        response = HTMLResponse(html, status_code=status)
        if cookies:
            self.auth.set_cookies(response, cookies)
        return response

    def url(self, request: Request, path: str, **params: Any) -> str:
        """A URL of this dashboard (under its mount), with the non-empty ``params`` as its query."""
        clean = {k: v for k, v in params.items() if v not in (None, "")}
        return request.scope.get("root_path", "") + path + (("?" + urlencode(clean)) if clean else "")

    def error(self, request: Request, status: int, text: str) -> Response:
        """An error for any request: JSON for the API and /metrics, else the error page (no user:
        the error may be that there is none).  A session the guards made for this request (from a
        remember-me token) still reaches the browser."""
        response: Response
        if "/api/" in request.url.path or request.url.path.endswith("/metrics"):
            response = JSONResponse({"error": text}, status_code=status)
        else:
            response = HTMLResponse(self.env.get_template("error.html").render(
                user=None, message=text, root=request.scope.get("root_path", ""), path="", csrf="", query={}),
                status_code=status)
        self.auth.set_cookies(response, getattr(request.state, "new_cookies", None) or [])
        return response


Handler = Callable[[Dashboard, Request, Principal], Awaitable[Response]]
"""A page or API handler behind the guards: the dashboard, the request and who sent it."""
Open = Callable[[Dashboard, Request], Awaitable[Response]]
"""A handler anyone may call (login, health, the OpenAPI document)."""
Endpoint = Callable[[Request], Awaitable[Response]]
"""A Starlette endpoint: what the guards make of a handler."""
