"""Security plumbing shared by every dashboard response: headers and safe redirects (tokens and their
constant-time comparison live in :mod:`errands.services.tokens`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


class SecurityHeaders:
    """ASGI middleware: every response carries the headers above; pages are never cached."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope.get("path", "").startswith("/static/") or "/static/" in scope.get("path", "")

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in HEADERS if k not in names]
                if not static and b"cache-control" not in names:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def local_path(target: str, fallback: str = "/") -> str:
    """``target`` when it is a path on this site, else ``fallback``: never an off-site redirect
    (``//host`` and ``/\\host`` are other sites to a browser)."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return fallback


def cross_site(headers: Mapping[str, str]) -> bool:
    """Whether a browser sent this request from another site (a form on evil.example posting to us).

    ``Sec-Fetch-Site`` first: browsers set it themselves (Chrome 76, Firefox 90, Safari 16.4) and no page
    can forge it; only ``same-origin`` and ``none`` (typed or bookmarked) are ours.  Without it, an
    ``Origin`` whose host is not the request's ``Host`` (or ``null``, a sandboxed frame).  Neither header:
    not a browser's cross-site form (curl, scripts), so not refused.  Go's ``CrossOriginProtection``
    decides the same way."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site not in ("same-origin", "none")
    origin = headers.get("origin")
    if origin is None:
        return False
    if origin == "null":
        return True
    return urlsplit(origin).netloc.lower() != headers.get("host", "").lower()


__all__ = ["CSP", "HEADERS", "SecurityHeaders", "cross_site", "local_path"]
