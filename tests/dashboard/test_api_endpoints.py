"""Each JSON endpoint does what the pages do, on every backend; accounts are managed safely."""

from __future__ import annotations

import socket

from conftest import ADMIN, PASSWORD, VIEWER, csrf, login
from helpers import drain, wait_for


def _post(web, path, body=None):  # type: ignore[no-untyped-def]
    return web.post(path, json=body or {}, headers={"X-CSRF-Token": csrf(web)})


def test_overview_windows_and_bad_window(web, dash_app):
    dash_app.registry["mail"].enqueue("a@b.c")
    login(web)
    for window, buckets in (("1h", 60), ("24h", 72), ("7d", 84)):
        data = web.get(f"/api/overview?window={window}").json()
        assert data["totals"]["ready"] == 1 and len(data["throughput"]["succeeded"]) == buckets
        assert data["no_worker"] is True
    refused = web.get("/api/overview?window=1y")
    assert refused.status_code == 400 and "window must be one of 1h, 24h, 7d" in refused.json()["error"]


def test_workers_show_host_pid_queues_concurrency_and_current_jobs(web, dash_app):
    store = dash_app.store
    store.workers.register("web-1:4242:abc", socket.gethostname(), 4242, ["mails", "default"], 8)
    job = dash_app.registry["mail"].enqueue("a@b.c")
    assert [c.id for c in store.jobs.claim("web-1:4242:abc", ["mails"], 1, 30.0)] == [job.id]
    login(web)
    [worker] = web.get("/api/workers").json()["workers"]
    assert (worker["hostname"], worker["pid"], worker["queues"], worker["concurrency"]) == (
        socket.gethostname(), 4242, ["mails", "default"], 8)
    assert worker["alive"] and worker["current_jobs"] == [job.id] and worker["jobs_done"] == 0
    overview = web.get("/api/overview").json()
    assert overview["workers_alive"] == 1 and overview["no_worker"] is False
    assert "web-1:4242:abc" in web.get("/workers").text


def test_queues_pause_resume_and_limits_in_force(web, dash_app):
    @dash_app.job(name="sms", queue="texts", rate_limit="5/minute", concurrency_limit=2)
    def sms(to: str) -> None: ...

    login(web)
    assert _post(web, "/api/queues/texts/pause").json() == {"queue": "texts", "paused": True}
    texts = {q["name"]: q for q in web.get("/api/queues").json()["queues"]}["texts"]
    assert texts["paused"] and texts["jobs"] == ["sms"]
    assert texts["limits"] == ["sms: at most 5 starts per 60s", "sms: at most 2 running per group"]
    assert dash_app.paused_queues() == ["texts"]
    assert _post(web, "/api/queues/texts/resume").json()["paused"] is False
    assert _post(web, "/api/queues/texts/explode").status_code == 404
    assert _post(web, "/api/queues/no%20such%20queue!/pause").status_code == 400
    assert dash_app.paused_queues() == []
    actions = [e["action"] for e in web.get("/api/audit").json()["entries"]]
    assert actions[:2] == ["resume", "pause"]  # newest first


def test_periodic_jobs_list_and_run_now(web, dash_app):
    @dash_app.periodic("*/5 * * * *", args=("nightly",), name="test_api_endpoints.cleanup")
    def cleanup(label: str) -> None: ...

    login(web)
    [schedule] = web.get("/api/periodic").json()["schedules"]
    assert schedule["cron"] == "*/5 * * * *" and len(schedule["next"]) == 3 and schedule["last_slot"] is None
    job_id = _post(web, f"/api/periodic/{schedule['name']}/run").json()["job_id"]
    detail = web.get(f"/api/jobs/{job_id}").json()
    assert detail["name"] == schedule["name"] and detail["arguments"]["args"] == ["nightly"]
    missing = _post(web, "/api/periodic/nothing/run")
    assert missing.status_code == 400 and "no periodic job named 'nothing'" in missing.json()["error"]


def test_stale_jobs_are_explained_listed_and_recovered(web, dash_app):
    job = dash_app.registry["mail"].enqueue("a@b.c")
    dash_app.store.jobs.claim("ghost:1:x", ["mails"], 1, 1.0)  # a worker that dies right after claiming
    wait_for(lambda: dash_app.counts()["mails"].stale == 1, message="the 1 s lease to lapse")
    login(web)
    stale = web.get("/api/jobs?state=stale").json()["jobs"]
    assert [j["id"] for j in stale] == [job.id]
    why = " ".join(web.get(f"/api/jobs/{job.id}").json()["why"])
    assert "ghost:1:x" in why and "stopped heart-beating" in why
    assert "Recover now" in web.get("/stale").text
    report = _post(web, "/api/stale/recover").json()
    assert report == {"released": [job.id], "buried": []}
    assert web.get(f"/api/jobs/{job.id}").json()["state"] == "ready"
    assert web.get("/api/audit").json()["entries"][0]["action"] == "recover"


def test_cancel_a_waiting_job_from_the_api(web, dash_app):
    job = dash_app.registry["mail"].using(delay=600).enqueue("a@b.c")
    login(web)
    assert _post(web, f"/api/jobs/{job.id}/cancel").json() == {"outcome": "cancelled"}
    assert dash_app.job_state(job.id).value == "cancelled"
    assert _post(web, f"/api/jobs/{job.id}/cancel").json() == {"outcome": "gone"}


def test_enqueue_form_lists_registered_jobs_with_their_parameters(web, dash_app):
    login(web)
    jobs = {j["name"]: j for j in web.get("/api/enqueue").json()["jobs"]}
    assert set(jobs) == {"mail", "boom"}
    mail = [(p["name"], p["required"]) for p in jobs["mail"]["parameters"]]
    assert mail == [("to", True), ("subject", False)]


def test_why_a_job_waits_for_a_rate_limit_or_an_unknown_name(web, dash_app):
    @dash_app.job(name="report", queue="reports", rate_limit="1/hour")
    def report(n: int) -> None: ...

    report.enqueue(1)
    drain(dash_app, ("reports",))  # the one start of this hour
    second = report.enqueue(2)
    ghost = dash_app.store.jobs.enqueue([dash_app.registry["mail"].prepare("x")._replace(name="retired_job")])[0]
    login(web)
    assert "rate limit is used up (1 of 1 starts" in " ".join(web.get(f"/api/jobs/{second.id}").json()["why"])
    assert "no job named 'retired_job' is registered" in " ".join(web.get(f"/api/jobs/{ghost}").json()["why"])


def test_users_are_created_disabled_and_given_new_passwords(web, dash_app):
    login(web)
    token = csrf(web)
    short = web.post("/users", data={"csrf": token, "username": "bob", "role": "viewer", "password": "short"})
    assert short.status_code == 400 and "at least 10 characters" in short.text
    made = web.post("/users", follow_redirects=False,
                    data={"csrf": token, "username": "bob", "role": "viewer", "password": "bob's long secret"})
    assert made.status_code == 303
    stored = dash_app.store.accounts.get_user("bob").password_hash
    assert stored.startswith("scrypt$") and "bob's long secret" not in stored
    assert [u["username"] for u in web.get("/api/users?q=bo").json()["users"]] == ["bob"]
    assert web.post("/users/disable", data={"csrf": token, "username": ADMIN}).status_code == 400  # not yourself
    web.post("/users/disable", data={"csrf": token, "username": "bob"})
    with web.__class__(web.app, base_url="https://testserver") as other:
        assert login(other, "bob", "bob's long secret").status_code == 401  # disabled
        web.post("/users/enable", data={"csrf": token, "username": "bob"})
        assert login(other, "bob", "bob's long secret").status_code == 303
        web.post("/users/password", data={"csrf": token, "username": "bob", "password": "a brand new secret"})
        assert login(other, "bob", "bob's long secret").status_code == 401
        assert login(other, "bob", "a brand new secret").status_code == 303
    missing = web.post("/users/password", data={"csrf": token, "username": "nobody", "password": "a brand new one"})
    assert missing.status_code == 400 and "no user &#39;nobody&#39;" in missing.text
    again = web.post("/users/enable", data={"csrf": token, "username": "bob"}, follow_redirects=False)
    assert again.status_code == 303  # enabling an enabled user is fine (MySQL reports 0 changed rows)
    actions = {e["action"] for e in web.get("/api/audit").json()["entries"]}
    assert {"user-create", "user-disable", "user-enable", "user-password"} <= actions


def test_theme_is_saved_with_the_account(web):
    login(web, VIEWER)
    token = csrf(web)
    assert web.post("/account/theme", data={"csrf": token, "theme": "dark", "back": "/jobs"},
                    follow_redirects=False).headers["location"].endswith("/jobs")
    assert web.get("/api/me").json()["theme"] == "dark"
    assert 'data-theme="dark"' in web.get("/").text
    assert web.post("/account/theme", data={"csrf": token, "theme": "neon"}).status_code == 400
    off_site = web.post("/account/theme", data={"csrf": token, "theme": "light", "back": "//evil.example/"},
                        follow_redirects=False)
    assert off_site.headers["location"] == "/"  # never redirects off-site


def test_login_redirects_only_within_the_dashboard(web):
    response = web.post("/login", data={"username": ADMIN, "password": PASSWORD, "next": "https://evil.example/"},
                        follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/"
    sideways = web.post("/login", data={"username": ADMIN, "password": PASSWORD, "next": "/\\evil.example/"},
                        follow_redirects=False)
    assert sideways.headers["location"] == "/"  # a browser reads /\host as //host
