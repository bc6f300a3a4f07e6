"""Stored schedules from the periodic page (a form, buttons, CSRF, admins only) and the JSON API (in the
OpenAPI document); code schedules read-only, marked "from code".  SQLite only: the service layer they
call is tested on every backend (features/test_dynamic_schedules.py)."""

from __future__ import annotations

import pytest
from conftest import ADMIN, VIEWER, csrf, login
from helpers import invoke_cli

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])


def _post(web, path, body=None):  # type: ignore[no-untyped-def]
    return web.post(path, json=body or {}, headers={"X-CSRF-Token": csrf(web)})


def test_the_periodic_page_adds_edits_pauses_resumes_and_deletes_stored_schedules(web, dash_app):
    @dash_app.periodic("0 3 * * *", name="pages.nightly")
    def nightly() -> None: ...

    login(web, ADMIN)
    token = csrf(web)
    page = web.get("/periodic").text
    assert "from code" in page and 'action="/periodic/add"' in page and "Add a schedule" in page
    form = {"csrf": token, "name": "mails.hourly", "job": "mail", "cron": "15 * * * *", "timezone": "Europe/Berlin",
            "arguments": '["a@b.c"]', "queue": "", "priority": "", "catch_up": "all", "catch_up_limit": "5"}
    r = web.post("/periodic/add", data=form, follow_redirects=False)
    assert r.status_code == 303, r.text
    [stored] = [s for s in web.get("/api/periodic").json()["schedules"] if s["source"] == "database"]
    assert (stored["job"], stored["timezone"], stored["catch_up"], stored["catch_up_limit"], stored["version"]) == (
        "mail", "Europe/Berlin", "all", 5, 1)
    edit_page = web.get("/periodic?edit=mails.hourly").text
    assert "Edit schedule mails.hourly" in edit_page and 'value="15 * * * *"' in edit_page
    assert web.post("/periodic/mails.hourly/edit", data=form, follow_redirects=False).status_code == 303
    [unchanged] = [s for s in web.get("/api/periodic").json()["schedules"] if s["source"] == "database"]
    assert unchanged["version"] == 1  # the form saved as it was filled in changes nothing
    r = web.post("/periodic/mails.hourly/edit", data={**form, "cron": "45 * * * *", "arguments": '{"args": ["x@y.z"]}'},
                 follow_redirects=False)
    assert r.status_code == 303
    assert web.post("/periodic/mails.hourly/pause", data={"csrf": token}, follow_redirects=False).status_code == 303
    assert "<strong>paused</strong>" in web.get("/periodic").text
    assert web.post("/periodic/mails.hourly/resume", data={"csrf": token}, follow_redirects=False).status_code == 303
    for bad in ({"job": "nope"}, {"cron": "every day"}, {"arguments": "{"}, {"priority": "high"},
                {"name": "pages.nightly"}):
        assert web.post("/periodic/add", data={**form, "name": "other", **bad}).status_code == 400, bad
    assert web.post("/periodic/add", data={**form, "csrf": "forged"}).status_code == 403
    assert web.post("/periodic/mails.hourly/explode", data={"csrf": token}).status_code == 404
    assert web.post("/periodic/mails.hourly/delete", data={"csrf": token}, follow_redirects=False).status_code == 303
    actions = [e["action"] for e in web.get("/api/audit").json()["entries"]]
    assert actions[:6] == ["schedule-delete", "schedule-resume", "schedule-pause", "schedule-edit", "schedule-edit",
                           "schedule-add"]

    web.post("/logout", data={"csrf": token})
    login(web, VIEWER)
    token = csrf(web)
    assert "Add a schedule" not in web.get("/periodic").text
    assert web.post("/periodic/add", data={**form, "csrf": token}).status_code == 403


def test_the_api_changes_stored_schedules_and_the_document_describes_it(web, dash_app):
    login(web, ADMIN)
    added = _post(web, "/api/periodic", {"name": "mails.daily", "job": "mail", "cron": "0 8 * * *",
                                         "args": ["a@b.c"], "catch_up": "none"})
    assert added.status_code == 200 and added.json()["version"] == 1 and added.json()["source"] == "database"
    edited = _post(web, "/api/periodic/mails.daily/edit", {"kwargs": {"subject": "daily"}, "priority": 3}).json()
    assert (edited["version"], edited["priority"], edited["arguments"]) == (
        2, 3, {"args": ["a@b.c"], "kwargs": {"subject": "daily"}})
    assert _post(web, "/api/periodic/mails.daily/pause").json()["paused"] is True
    assert _post(web, "/api/periodic/mails.daily/resume").json()["paused"] is False
    ran = _post(web, "/api/periodic/mails.daily/run").json()["job_id"]
    assert web.get(f"/api/jobs/{ran}").json()["arguments"]["kwargs"] == {"subject": "daily"}
    for body in ({"name": "x", "job": "nope", "cron": "* * * * *"}, {"name": "x", "job": "mail"},
                 {"name": "x", "job": "mail", "cron": "* * * * *", "args": "a@b.c"},
                 {"name": "x", "job": "mail", "cron": "* * * * *", "args": ["a"], "priority": "high"}):
        assert _post(web, "/api/periodic", body).status_code == 400, body
    assert _post(web, "/api/periodic/missing/edit", {"priority": 1}).status_code == 404
    assert _post(web, "/api/periodic/mails.daily/delete").json() == {"name": "mails.daily", "deleted": True}
    paths = web.get("/api/openapi.json").json()["paths"]
    for path in ("/api/periodic", "/api/periodic/{name}/edit", "/api/periodic/{name}/delete",
                 "/api/periodic/{name}/{action}"):
        assert "post" in paths[path], path


def test_the_cli_lists_adds_edits_pauses_resumes_and_deletes(dash_app, migrated_url):
    def cli(*args: str):  # type: ignore[no-untyped-def]
        return invoke_cli(migrated_url, "periodic", *args, ERRANDS_APP="tests_cli_app:app")

    import sys
    import types

    module = types.ModuleType("tests_cli_app")
    module.app = dash_app  # type: ignore[attr-defined]
    sys.modules["tests_cli_app"] = module
    try:
        done = cli("add", "mails.weekly", "mail", "0 9 * * mon", "--tz", "America/New_York", "--args", '["a@b.c"]',
                   "--catch-up", "all", "--catch-up-limit", "2")
        assert done.returncode == 0 and "added (version 1)" in done.stdout, done.stderr
        assert cli("edit", "mails.weekly", "--priority", "7").returncode == 0
        assert cli("pause", "mails.weekly").stdout.strip() == "schedule mails.weekly paused"
        listing = cli("list").stdout
        assert "stored, version 3  PAUSED" in listing and "catch_up: all (at most 2)" in listing
        assert cli("resume", "mails.weekly").returncode == 0
        refused = cli("add", "x", "nope", "* * * * *")
        assert refused.returncode != 0 and "no job named 'nope'" in refused.stderr
        assert cli("delete", "mails.weekly").returncode == 0
        assert cli().stdout.strip() == "this app has no periodic jobs"
        actors = {a.actor for a in dash_app.store.accounts.audit_log(10)}
        assert len(actors) == 1
    finally:
        del sys.modules["tests_cli_app"]
