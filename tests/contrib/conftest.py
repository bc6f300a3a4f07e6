"""The two example apps on the test's database, each with its in-process worker, as ``Web`` clients."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from contrib_helpers import BASE, SECRET, USERS, Web, load_example
from helpers import scaled
from starlette.testclient import TestClient


@pytest.fixture
def fastapi_app(db_url: str) -> Iterator[Any]:
    api = load_example("fastapi_app").create_app(db_url, users=USERS, secret_key=SECRET, shutdown_timeout=scaled(5.0))
    yield api
    api.state.errands.store.close()


@pytest.fixture
def flask_app(db_url: str) -> Iterator[Any]:
    app = load_example("flask_app").create_app(db_url, users=USERS, secret_key=SECRET)
    yield app
    ext = app.extensions["errands"]
    try:
        assert ext["worker"].stop(), "the in-process worker stops"
    finally:
        ext["dashboard"].close()
        ext["errands"].store.close()


@pytest.fixture(params=["fastapi", "flask"])
def framework(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def web_factory(framework: str, db_url: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``web()`` gives a fresh client (own cookies) of the framework's example app; ``.errands`` is its app."""
    if framework == "fastapi":
        api = request.getfixturevalue("fastapi_app")
        clients: list[TestClient] = []

        def make_fastapi() -> Web:
            client = TestClient(api, base_url=BASE, raise_server_exceptions=True)
            if not clients:
                client.__enter__()  # the first client runs the lifespan (the worker) for all of them
            clients.append(client)
            return Web(client, flask=False)

        make_fastapi.errands = api.state.errands  # type: ignore[attr-defined]
        yield make_fastapi
        if clients:
            clients[0].__exit__(None, None, None)
        return
    app = request.getfixturevalue("flask_app")

    def make_flask() -> Web:
        return Web(app.test_client(), flask=True)

    make_flask.errands = app.extensions["errands"]["errands"]  # type: ignore[attr-defined]
    yield make_flask
