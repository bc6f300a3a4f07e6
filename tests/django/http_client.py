"""A browser-like client for an ASGI app, a WSGI app or a real server: cookies kept, redirects not followed.

Small on purpose: these tests only need cookies, forms and status codes, and must run with
nothing but Django and errands installed (Starlette's TestClient needs httpx).
"""

from __future__ import annotations

import asyncio
import http.client
import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode, urlsplit
from wsgiref.util import setup_testing_defaults

from helpers import scaled


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    @property
    def location(self) -> str | None:
        return self.header("location")

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


@dataclass
class Browser:
    asgi: Any = None
    wsgi: Callable[..., Iterable[bytes]] | None = None
    server: tuple[str, int] | None = None
    """(host, port) of a server on this machine, spoken to over HTTP."""
    cookies: dict[str, str] = field(default_factory=dict)

    def get(self, path: str, **headers: str) -> Reply:
        return self.request("GET", path, headers=headers)

    def post(self, path: str, data: dict[str, str] | None = None, **headers: str) -> Reply:
        return self.request("POST", path, data=data or {}, headers=headers)

    def request(self, method: str, path: str, *, data: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        parts = urlsplit(path)
        body = urlencode(data).encode() if data is not None else b""
        sent = {k.replace("_", "-").lower(): v for k, v in (headers or {}).items()}
        if data is not None:
            sent["content-type"] = "application/x-www-form-urlencoded"
        if self.cookies:
            sent["cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        sent.setdefault("host", "testserver")
        transport = self._asgi if self.asgi is not None else self._wsgi if self.wsgi is not None else self._http
        reply = transport(method, parts.path, parts.query, sent, body)
        for name, value in reply.headers:
            if name.lower() == "set-cookie":
                jar: SimpleCookie = SimpleCookie()
                jar.load(value)
                for key, morsel in jar.items():
                    if morsel["max-age"] == "0" or morsel.value == "":
                        self.cookies.pop(key, None)
                    else:
                        self.cookies[key] = morsel.value
        return reply

    def _asgi(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
                 "root_path": "", "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
                 "client": ("127.0.0.1", 40000), "server": ("testserver", 80)}
        messages: list[dict[str, Any]] = []
        pending = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop()
            await asyncio.sleep(3600)  # the app waits for a disconnect it will not get
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            messages.append(message)

        asyncio.run(self.asgi(scope, receive, send))
        start = next(m for m in messages if m["type"] == "http.response.start")
        return Reply(start["status"], [(k.decode(), v.decode()) for k, v in start.get("headers", [])],
                     b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body"))

    def _wsgi(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
                                   "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))}
        for name, value in headers.items():
            key = name.upper().replace("-", "_")
            environ[key if key == "CONTENT_TYPE" else "HTTP_" + key] = value
        setup_testing_defaults(environ)
        captured: dict[str, Any] = {}

        def start_response(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = int(status.split()[0]), response_headers
            return lambda data: None

        assert self.wsgi is not None
        chunks = self.wsgi(environ, start_response)
        try:
            content = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        return Reply(captured["status"], list(captured["headers"]), content)

    def _http(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        assert self.server is not None
        headers = {**headers, "host": f"{self.server[0]}:{self.server[1]}"}
        connection = http.client.HTTPConnection(*self.server, timeout=scaled(30))
        try:
            connection.request(method, path + (f"?{query}" if query else ""), body=body or None, headers=headers)
            response = connection.getresponse()
            return Reply(response.status, response.getheaders(), response.read())
        finally:
            connection.close()
