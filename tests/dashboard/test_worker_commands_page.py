"""Quieting, resuming and stopping workers from the Workers page (forms with the CSRF token, admins
only) and the JSON API (in the OpenAPI document), each audited.  The store verbs run on every backend
in tests/store/contract/test_worker_commands_contract.py and a real worker obeys them in
tests/worker/test_worker_commands.py; the doors here are the same on every backend."""

from __future__ import annotations

import pytest
from conftest import VIEWER, csrf, login

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])


def _register(app, worker_id: str, host: str = "host-a") -> None:  # type: ignore[no-untyped-def]
    app.store.workers.register(worker_id, host, 1, ["default"], 1, lease=30.0, heartbeat_every=10.0)


def _states(app) -> dict[str, tuple[str | None, str | None]]:  # type: ignore[no-untyped-def]
    return {w.id: (w.command, w.status) for w in app.store.workers.list_workers()}


def test_the_api_quiets_resumes_and_stops_a_worker_or_a_host(web, dash_app):
    _register(dash_app, "a:1:x")
    _register(dash_app, "a:2:y")
    _register(dash_app, "b:3:z", host="host-b")
    login(web)
    token = {"X-CSRF-Token": csrf(web)}
    done = web.post("/api/workers/quiet", json={"worker": "a:1:x"}, headers=token)
    assert done.json() == {"action": "quiet", "workers": ["a:1:x"], "refused": []}
    dash_app.store.workers.heartbeat("a:1:x", 0, "quiet")  # the worker acknowledges
    listed = {w["id"]: w for w in web.get("/api/workers").json()["workers"]}
    assert (listed["a:1:x"]["state"], listed["a:2:y"]["state"]) == ("quiet", "running")
    assert web.post("/api/workers/stop", json={"host": "host-a"}, headers=token).json()["workers"] == [
        "a:1:x", "a:2:y"]
    assert _states(dash_app) == {"a:1:x": ("stop", "quiet"), "a:2:y": ("stop", None), "b:3:z": (None, None)}
    assert web.get("/api/workers").json()["workers"][0]["state"] == "stop requested"

    refused = web.post("/api/workers/resume", json={"worker": "a:1:x"}, headers=token)
    assert refused.status_code == 409 and "a stop cannot be taken back" in refused.json()["error"]
    assert web.post("/api/workers/quiet", json={"host": "host-a"}, headers=token).json()["refused"] == [
        "a:1:x: stopping", "a:2:y: stopping"]
    assert web.post("/api/workers/quiet", json={"worker": "nobody"}, headers=token).status_code == 404
    assert web.post("/api/workers/quiet", json={"host": "nowhere"}, headers=token).status_code == 404
    assert web.post("/api/workers/hibernate", json={"worker": "b:3:z"}, headers=token).status_code == 404
    for body in ({}, {"worker": "b:3:z", "host": "host-b"}, {"worker": 7}):
        assert web.post("/api/workers/quiet", json=body, headers=token).status_code == 400
    assert web.post("/api/workers/quiet", json={"worker": "b:3:z"}).status_code == 403  # no CSRF token
    assert _states(dash_app)["b:3:z"] == (None, None)

    audit = [(e["action"], e["target"]) for e in web.get("/api/audit").json()["entries"]]
    assert audit[:3] == [("quiet", "host host-a"), ("stop", "host host-a"), ("quiet", "worker a:1:x")]
    operations = web.get("/api/openapi.json").json()["paths"]["/api/workers/{action}"]["post"]
    assert "WorkersCommanded" in str(operations["responses"]["200"])


def test_the_workers_page_shows_each_state_and_its_buttons_for_admins(web, dash_app):
    _register(dash_app, "a:1:x")
    login(web)
    page = web.get("/workers").text
    assert 'action="/workers/quiet"' in page and 'action="/workers/stop"' in page and ">running<" in page
    token = csrf(web)
    sent = web.post("/workers/quiet", data={"csrf": token, "worker": "a:1:x"}, follow_redirects=False)
    assert sent.status_code == 303 and "done=quiet" in sent.headers["location"]
    page = web.get("/workers").text
    assert ">quiet requested<" in page and 'action="/workers/resume"' in page
    web.post("/workers/resume", data={"csrf": token, "worker": "a:1:x"})
    assert _states(dash_app)["a:1:x"] == (None, None)
    _register(dash_app, "b:2:y", host="host-b")
    assert '<option>host-a</option><option>host-b</option>' in web.get("/workers").text
    web.post("/workers/stop", data={"csrf": token, "host": "host-b"})
    assert _states(dash_app)["b:2:y"] == ("stop", None)
    assert web.post("/workers/stop", data={"worker": "a:1:x"}).status_code == 403  # no CSRF token
    assert web.post("/workers/stop", data={"csrf": token, "worker": "nobody"}).status_code == 400
    web.post("/logout", data={"csrf": token})

    login(web, VIEWER)
    page = web.get("/workers").text
    assert ">running<" in page and 'action="/workers/quiet"' not in page
    refused = web.post("/workers/stop", data={"csrf": csrf(web), "worker": "a:1:x"})
    assert refused.status_code == 403 and _states(dash_app)["a:1:x"] == (None, None)
