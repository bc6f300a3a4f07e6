"""The example apps loaded from examples/, and one way to drive FastAPI and Flask clients alike."""

from __future__ import annotations

import importlib.util
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
USERS = {"ada": ("admin", "ada-password-1"), "vic": ("viewer", "vic-password-1")}
SECRET = "s3cret-" * 6
BASE = "https://testserver"


def load_example(name: str) -> ModuleType:
    """examples/<name>/app.py as module ``errands_example_<name>`` (both examples are called app.py)."""
    module_name = f"errands_example_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / name / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # Flask finds its root path through sys.modules
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Reply:
    status: int
    headers: Any
    text: str

    def json(self) -> Any:
        import json

        return json.loads(self.text)

    @property
    def location(self) -> str | None:
        return self.headers.get("location")


class Web:
    """A browser-ish client over either framework's test client (no redirects followed)."""

    def __init__(self, client: Any, flask: bool) -> None:
        self.client = client
        self.flask = flask
        self.default_headers: dict[str, str] = {}

    def request(self, method: str, path: str, **kw: Any) -> Reply:
        kw["headers"] = {**self.default_headers, **kw.get("headers", {})}
        if self.flask:
            r = self.client.open(path, method=method, base_url=BASE, **kw)
            return Reply(r.status_code, r.headers, r.get_data(as_text=True))
        if "data" in kw and isinstance(kw["data"], (bytes, str)):
            kw["content"] = kw.pop("data")
        r = self.client.request(method, path, follow_redirects=False, **kw)
        return Reply(r.status_code, r.headers, r.text)

    def get(self, path: str, **kw: Any) -> Reply:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Reply:
        return self.request("POST", path, **kw)

    def cookie(self, name: str) -> str | None:
        if self.flask:
            found = self.client.get_cookie(name, domain="testserver")
            return None if found is None else found.value
        return self.client.cookies.get(name)

    def set_cookie(self, name: str, value: str) -> None:
        if self.flask:
            self.client.set_cookie(name, value, domain="testserver")
        else:
            self.client.cookies.set(name, value, domain="testserver")

    def login(self, username: str, password: str | None = None, next: str = "/") -> Reply:
        return self.post("/login", data={"username": username, "password": password or USERS[username][1],
                                         "next": next})

    def csrf(self) -> str:
        token = self.get("/errands/api/me").json()["csrf"]
        assert token, "a signed-in user gets a CSRF token"
        return str(token)


def links(html: str) -> list[str]:
    """Every href, src and form action of a page."""
    return re.findall(r'(?:href|src|action|formaction)="([^"]*)"', html)


def form_csrf(html: str) -> str:
    found = re.findall(r'name="csrf" value="([^"]*)"', html)
    assert found, "the page has a form with a CSRF field"
    return found[0]
