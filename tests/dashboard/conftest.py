"""A dashboard on the test's database, with an admin and a viewer, driven through HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from errands import Errands
from errands.dashboard import AuthSettings, create_dashboard
from errands.services.passwords import hash_password

ADMIN, VIEWER, PASSWORD = "ada", "vic", "correct horse battery"
_HASH = hash_password(PASSWORD)  # scrypt is slow on purpose: hash once for the whole run


@pytest.fixture
def dash_app(app: Errands) -> Errands:
    app.store.accounts.create_user(ADMIN, _HASH, "admin")
    app.store.accounts.create_user(VIEWER, _HASH, "viewer")

    @app.job(name="mail", queue="mails")
    def mail(to: str, subject: str = "hi") -> None: ...

    @app.job(name="boom", max_attempts=1)
    def boom(n: int | str) -> None:  # a str too: the bidi tests put tricky text in its error message
        raise RuntimeError(f"<script>alert({n})</script>")

    return app


@pytest.fixture
def web(dash_app: Errands) -> Iterator[TestClient]:
    with TestClient(create_dashboard(dash_app, settings=AuthSettings(max_failures_per_account=3,
                                                                    max_failures_per_address=6)),
                    base_url="https://testserver", raise_server_exceptions=False) as client:
        yield client


def login(client: TestClient, username: str = ADMIN, password: str = PASSWORD, remember: bool = False):  # type: ignore[no-untyped-def]
    data = {"username": username, "password": password}
    if remember:
        data["remember"] = "1"
    return client.post("/login", data=data, follow_redirects=False)


def csrf(client: TestClient) -> str:
    return client.get("/api/me").json()["csrf"]
