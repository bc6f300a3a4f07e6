"""Issue 15, point 12 e: a queue's limits edited live from the queues page (and the API), stored,
audited, admins only, and obeyed by a worker that is already running, on every backend."""

from __future__ import annotations

import threading
import time

from conftest import ADMIN, VIEWER, csrf, login
from helpers import scaled, wait_for

from errands.services import limits as qlimits
from errands.worker import admission
from errands.worker.runner import Worker, WorkerSettings


def test_admins_set_a_queues_limits_from_the_queues_page_audited(web, dash_app):
    dash_app.get_job("mail").enqueue("a@example.com")
    login(web, ADMIN)
    token = csrf(web)
    page = web.get("/queues").text
    assert 'action="/queues/mails/limits"' in page
    r = web.post("/queues/mails/limits", data={"csrf": token, "concurrency": "2", "rate": "10/minute"},
                 follow_redirects=False)
    assert r.status_code == 303
    mails = next(q for q in web.get("/api/queues").json()["queues"] if q["name"] == "mails")
    assert mails["stored_limits"] == {"queue": "mails", "concurrency": 2, "rate": "10/60s",
                                      "text": "at most 2 running, at most 10 starts per 60s"}
    assert 'value="2"' in web.get("/queues").text
    entry = web.get("/api/audit").json()["entries"][0]
    assert (entry["actor"], entry["action"], entry["target"]) == (ADMIN, "limits", "queue mails")
    done = web.post("/api/queues/mails/limits", json={"concurrency": None, "rate": "5/s"},
                    headers={"X-CSRF-Token": token})
    assert done.json() == {"queue": "mails", "concurrency": None, "rate": "5/1s", "text": "at most 5 starts per 1s"}
    web.post("/api/queues/mails/limits", json={}, headers={"X-CSRF-Token": token})
    assert dash_app.store.features.queue_limits() == {}


def test_queue_limits_refuse_viewers_missing_csrf_and_bad_input(web, dash_app):
    login(web, VIEWER)
    token = csrf(web)
    assert "/limits" not in web.get("/queues").text
    assert web.post("/queues/mails/limits", data={"csrf": token, "concurrency": "1"}).status_code == 403
    assert web.post("/api/queues/mails/limits", json={"concurrency": 1},
                    headers={"X-CSRF-Token": token}).status_code == 403
    web.post("/logout", data={"csrf": token})
    login(web, ADMIN)
    assert web.post("/queues/mails/limits", data={"concurrency": "1"}).status_code == 403
    token = csrf(web)
    for form in ({"concurrency": "0"}, {"concurrency": "-1"}, {"concurrency": "1.5"}, {"concurrency": "x"},
                 {"rate": "lots"}, {"rate": "0/s"}, {"rate": "5/fortnight"}, {"concurrency": "9" * 20}):
        assert web.post("/queues/mails/limits", data={"csrf": token, **form}).status_code == 400, form
    assert web.post("/queues/no%2Fsuch/limits", data={"csrf": token, "concurrency": "1"}).status_code in (400, 404)
    for body in ({"concurrency": True}, {"concurrency": 1.5}, {"rate": 5}, {"concurrency": "two"}):
        assert web.post("/api/queues/mails/limits", json=body, headers={"X-CSRF-Token": token}).status_code == 400
    assert dash_app.store.features.queue_limits() == {}


def test_parse_limits():
    assert qlimits.parse_limits("3", "") == (3, None, None)
    assert qlimits.parse_limits(None, "100/30s") == (None, 100, 30.0)


def test_a_running_worker_obeys_a_concurrency_limit_set_while_it_runs(web, dash_app, monkeypatch):
    monkeypatch.setattr(admission, "QUEUE_LIMITS_TTL", 0.2)
    lock, running, most, finished = threading.Lock(), [0], [0], []

    @dash_app.job(name="nap", queue="naps")
    def nap() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
            finished.append(1)

    worker = Worker(dash_app, WorkerSettings(queues=("naps",), concurrency=4, sleep=0.05, listen=False, prefetch=0))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        for _ in range(4):
            nap.enqueue()
        wait_for(lambda: len(finished) == 4, timeout=scaled(30), message="the first four runs")
        assert most[0] >= 2  # unlimited: they ran side by side
        login(web, ADMIN)
        r = web.post("/api/queues/naps/limits", json={"concurrency": 1}, headers={"X-CSRF-Token": csrf(web)})
        assert r.status_code == 200
        time.sleep(0.5)  # past the worker's reading interval
        most[0] = 0
        for _ in range(5):
            nap.enqueue()
        wait_for(lambda: len(finished) == 9, timeout=scaled(60), message="the five limited runs")
        assert most[0] == 1
        assert dash_app.store.jobs.list_failed() == []
    finally:
        worker.request_stop()
        thread.join(scaled(30))


def test_a_running_worker_obeys_a_rate_limit_set_while_it_runs(web, dash_app, monkeypatch):
    monkeypatch.setattr(admission, "QUEUE_LIMITS_TTL", 0.2)
    started: list[float] = []

    @dash_app.job(name="tick", queue="ticks")
    def tick() -> None:
        started.append(time.monotonic())

    worker = Worker(dash_app, WorkerSettings(queues=("ticks",), concurrency=2, sleep=0.05, listen=False, prefetch=0))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        login(web, ADMIN)
        assert web.post("/api/queues/ticks/limits", json={"rate": "2/minute"},
                        headers={"X-CSRF-Token": csrf(web)}).status_code == 200
        time.sleep(0.5)
        for _ in range(5):
            tick.enqueue()
        wait_for(lambda: len(started) >= 2, timeout=scaled(30), message="two starts")
        time.sleep(scaled(2))
        assert len(started) == 2  # the other three wait for the minute to pass
        waiting = [j for j in dash_app.store.jobs.list_jobs("ticks") if j.reserved_by is None]
        assert len(waiting) == 3 and all(j.attempts == 0 for j in waiting)  # their attempts were given back
    finally:
        worker.request_stop()
        thread.join(scaled(30))
