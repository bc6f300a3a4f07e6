"""Issue 15, point 13: alert banners on every page while an alert is crossed (and ``GET /api/alerts``),
and the JSON API's request limits (429 with Retry-After), separate for enqueueing, actions and reads,
per principal and per address."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import _HASH, ADMIN, PASSWORD, VIEWER, csrf, login
from helpers import wait_for
from starlette.testclient import TestClient

from errands import Errands
from errands.core.errors import ConfigurationError
from errands.dashboard import ApiLimits, AuthSettings, create_dashboard
from errands.dashboard.limits import RequestLimiter

PAGES = ("/", "/jobs", "/dead", "/stale", "/workers", "/queues", "/periodic", "/enqueue", "/audit", "/workflows")


def _banners(html: str) -> int:
    return html.count('class="banner alert-banner"')


def test_banners_show_on_every_page_while_crossed_and_go_when_cleared(web: TestClient, dash_app: Errands) -> None:
    login(web)
    for path in PAGES:
        assert _banners(web.get(path).text) == 0, path
    now = dash_app.store.now()
    assert dash_app.store.alerts.cross("dead_letter", "", 120, 100, now)
    assert dash_app.store.alerts.cross("oldest_ready", "mails", 900, 60, now)
    for path in PAGES:
        html = web.get(path).text
        assert _banners(html) == 2, path
        assert "the dead letter holds 120 entries (threshold 100)" in html
        assert "the oldest ready job in queue mails has waited 15.0 min (threshold 1.0 min)" in html
        assert 'href="/dead">Dead letter</a>' in html and 'href="/queues">Queues</a>' in html
    assert _banners(web.get("/jobs/999999").text) == 2  # the detail page of a job that is gone too
    body = web.get("/api/alerts").json()
    assert [(a["kind"], a["queue"], a["value"], a["threshold"]) for a in body["alerts"]] == [
        ("dead_letter", None, 120, 100), ("oldest_ready", "mails", 900, 60)]
    assert body["thresholds"]["dead_letter"] is None  # this app configures none: the fleet's workers may
    # A viewer sees them as well; an API answer carries no banner.
    web.post("/logout", data={"csrf": csrf(web)})
    login(web, VIEWER)
    assert _banners(web.get("/queues").text) == 2
    assert "banner" not in web.get("/api/overview").text
    assert dash_app.store.alerts.clear("dead_letter", "", 3, now)
    assert dash_app.store.alerts.clear("oldest_ready", "mails", 0, now)
    for path in PAGES:
        assert _banners(web.get(path).text) == 0, path
    assert web.get("/api/alerts").json()["alerts"] == []


def test_the_login_page_shows_no_banner(web: TestClient, dash_app: Errands) -> None:
    dash_app.store.alerts.cross("no_worker", "", 0, 1, dash_app.store.now())
    assert _banners(web.get("/login").text) == 0  # nobody signed in: nothing to tell
    login(web)
    assert "no worker is alive" in web.get("/").text


def test_a_dashboard_evaluates_the_apps_thresholds_as_it_serves_pages(db_url: str) -> None:
    app = Errands(db_url, alert_no_worker=True, alert_every=1)
    app.migrate()
    app.store.accounts.create_user(ADMIN, _HASH, "admin")
    heard: list[object] = []
    app.on_alert(heard.append)
    try:
        with TestClient(create_dashboard(app, settings=AuthSettings()), base_url="https://testserver") as web:
            login(web)

            def banner() -> bool:
                return "no worker is alive" in web.get("/workers").text

            wait_for(banner, timeout=20, message="the dashboard's own evaluation to cross no_worker")
            wait_for(lambda: heard, message="the hook")
            assert [(a.kind, a.crossed) for a in heard] == [("no_worker", True)]  # type: ignore[attr-defined]
            assert web.get("/api/alerts").json()["thresholds"]["no_worker"] is True
    finally:
        app.store.close()


# ---------------------------------------------------------------------------------- request limits
@pytest.fixture
def limited(dash_app: Errands) -> Iterator[TestClient]:
    limits = ApiLimits(enqueue="2/minute", enqueue_per_address=None, actions="3/minute", actions_per_address=None,
                       reads="5/minute", reads_per_address="40/minute")
    dash_app.store.accounts.create_user("ada2", _HASH, "admin")
    with TestClient(create_dashboard(dash_app, settings=AuthSettings(), api_limits=limits),
                    base_url="https://testserver", raise_server_exceptions=False) as client:
        yield client


def test_enqueue_actions_and_reads_have_separate_limits_per_principal(limited: TestClient, dash_app: Errands) -> None:
    login(limited)
    headers = {"X-CSRF-Token": limited.get("/api/me").json()["csrf"]}  # a read (1 of 5)
    enqueue = [limited.post("/api/enqueue", json={"job": "mail", "args": ["a@b.c"]}, headers=headers)
               for _ in range(3)]
    assert [r.status_code for r in enqueue] == [200, 200, 429]
    refused = enqueue[-1]
    assert 1 <= int(refused.headers["retry-after"]) <= 30  # 2 a minute: one more every 30 s
    assert refused.json()["retry_after"] == int(refused.headers["retry-after"])
    assert "at most 2 enqueue requests per 60 s from one user" in refused.json()["error"]
    assert len(dash_app.store.insights.search_jobs(limit=10)) == 2  # the refused one stored nothing
    # Actions and reads are counted apart: enqueueing used none of them.
    actions = [limited.post("/api/queues/mails/pause", headers=headers).status_code for _ in range(4)]
    assert actions == [200, 200, 200, 429]
    reads = [limited.get("/api/queues").status_code for _ in range(5)]
    assert reads == [200, 200, 200, 200, 429]
    assert limited.get("/metrics").status_code == 429  # a scrape is a read
    # Pages are not the API's: they answer.
    assert limited.get("/queues").status_code == 200
    # Another user has buckets of its own.
    limited.post("/logout", data={"csrf": headers["X-CSRF-Token"]})
    login(limited, "ada2", PASSWORD)
    assert limited.get("/api/queues").status_code == 200


def test_the_per_address_limit_holds_before_authentication(limited: TestClient) -> None:
    statuses = [limited.get("/api/overview").status_code for _ in range(41)]
    assert statuses[:40] == [401] * 40 and statuses[40] == 429  # no session lookup past the limit either
    assert "from one address" in limited.get("/api/jobs").json()["error"]


def test_token_buckets_refill_at_the_limits_rate() -> None:
    now = [1000.0]
    limiter = RequestLimiter(ApiLimits(enqueue="3/minute"), clock=lambda: now[0])
    assert [limiter.check("enqueue", "principal", "ada") for _ in range(3)] == [None, None, None]
    assert limiter.check("enqueue", "principal", "ada") == pytest.approx(20.0)
    assert limiter.check("enqueue", "principal", "bob") is None
    now[0] += 19.0
    assert limiter.check("enqueue", "principal", "ada") == pytest.approx(1.0)
    now[0] += 1.0
    assert limiter.check("enqueue", "principal", "ada") is None
    now[0] += 3600.0  # idle: the bucket is full again, never fuller
    assert [limiter.check("enqueue", "principal", "ada") for _ in range(4)][-1] is not None


def test_api_limits_from_text() -> None:
    limits = ApiLimits.from_text("enqueue=30/minute, reads_per_address=none")
    assert (limits.enqueue, limits.reads_per_address, limits.actions) == ("30/minute", None, "120/minute")
    assert ApiLimits.from_text(None) == ApiLimits()
    for bad in ("enqueue", "writes=3/minute", "reads=often"):
        with pytest.raises(ConfigurationError):
            ApiLimits.from_text(bad)
