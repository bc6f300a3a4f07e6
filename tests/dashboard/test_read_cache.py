"""The shared read models of the overview and the jobs list (dashboard/readcache.py): one load for
many concurrent requests, a lifetime, and an operator's own change visible at once, in this process
and in another process of the dashboard."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from conftest import PASSWORD, VIEWER, csrf, login
from starlette.testclient import TestClient

from errands.core.errors import ConfigurationError
from errands.dashboard import AuthSettings, create_dashboard
from errands.dashboard.readcache import ReadModelCache
from errands.services import operator as ops

HOUR = 3600.0
"""A lifetime no test outlives: what these tests see never depends on how fast the machine is."""


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_concurrent_page_loads_share_the_load_that_begins_after_them() -> None:
    cache = ReadModelCache(HOUR)
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def load() -> int:
        calls.append(1)
        started.set()
        assert release.wait(30)
        return len(calls)

    async def main() -> list[Any]:
        first = asyncio.ensure_future(cache.get("k", load))
        assert await asyncio.to_thread(started.wait, 30)
        # 63 more come while that load runs: it began before them and may miss a change made since,
        # so they all wait for the next load, one for all of them.
        others = [asyncio.ensure_future(cache.get("k", load)) for _ in range(63)]
        await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(first, *others)

    first, *others = asyncio.run(main())
    assert len(calls) == 2 and cache.loads == 2
    assert first.value == 1 and {id(e) for e in others} == {id(others[0])} and others[0].value == 2


def test_concurrent_refreshes_share_one_load() -> None:
    cache = ReadModelCache(HOUR)
    started, release = threading.Event(), threading.Event()

    def load() -> str:
        started.set()
        assert release.wait(30)
        return "model"

    async def main() -> list[Any]:
        first = asyncio.ensure_future(cache.get("k", load, live=True))
        assert await asyncio.to_thread(started.wait, 30)
        others = [asyncio.ensure_future(cache.get("k", load, live=True)) for _ in range(63)]
        await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(first, *others)

    entries = asyncio.run(main())
    assert cache.loads == 1 and {id(e) for e in entries} == {id(entries[0])}


def test_a_refresh_gets_the_model_of_the_last_second_then_the_previous_while_the_next_loads() -> None:
    clock = FakeClock()
    cache = ReadModelCache(1.0, clock=clock)
    values = iter(range(10))

    async def main() -> list[Any]:
        async def read(key: str = "k", live: bool = True) -> Any:
            return (await cache.get(key, lambda: next(values), live=live)).value

        async def reloaded() -> None:
            await asyncio.gather(*cache.inflight.values())

        seen = [await read()]  # 0: nothing yet, so this refresh waits for the load
        clock.now += 0.9
        seen.append(await read())  # 0: a second has not passed
        seen.append(await read("other"))  # 1: a key of its own
        clock.now += 0.2
        seen.append(await read())  # 0: expired: a reload starts, and this refresh does not wait for it
        await reloaded()
        seen.append(await read())  # 2: the reload
        seen.append(await read(live=False))  # 3: someone opens the page: a load after the click
        clock.now += cache.horizon + 0.1
        seen.append(await read())  # 4: too old to show even to a refresh: it waits for the reload
        return seen

    assert asyncio.run(main()) == [0, 0, 1, 0, 2, 3, 4]
    assert cache.loads == 5


def test_a_failed_load_is_kept_by_nobody() -> None:
    cache = ReadModelCache(HOUR)
    attempts: list[int] = []

    def load() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("database away")
        return "back"

    with pytest.raises(RuntimeError, match="database away"):
        asyncio.run(cache.get("k", load))
    assert asyncio.run(cache.get("k", load)).value == "back"


def test_a_load_that_began_before_a_clear_is_not_kept() -> None:
    cache = ReadModelCache(HOUR)
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        assert release.wait(30)
        return "before the change"

    async def main() -> tuple[str, str]:
        pending = asyncio.ensure_future(cache.get("k", slow))
        assert await asyncio.to_thread(started.wait, 30)
        cache.clear()  # a change made through the dashboard while the load ran
        release.set()
        old = (await pending).value
        return old, (await cache.get("k", lambda: "after the change", live=True)).value

    assert asyncio.run(main()) == ("before the change", "after the change")


def test_fragments_are_drawn_once_per_entry() -> None:
    cache = ReadModelCache(HOUR)
    drawn: list[str] = []

    async def main() -> list[str]:
        found = []
        for _ in range(3):
            entry = await cache.get("k", lambda: "rows", live=True)
            found.append(entry.fragment("html", lambda v: drawn.append(v) or f"<tr>{v}</tr>"))
        return found

    assert asyncio.run(main()) == ["<tr>rows</tr>"] * 3 and drawn == ["rows"]


def test_the_lifetime_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="cache_seconds"):
        create_dashboard(object(), cache_seconds=-1)  # type: ignore[arg-type]


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(ops, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, name, counted)
    return calls


def _client(dash_app: Any, cache_seconds: float = HOUR) -> TestClient:
    return TestClient(create_dashboard(dash_app, settings=AuthSettings(), cache_seconds=cache_seconds),
                      base_url="https://testserver", raise_server_exceptions=False)


LIVE = {"X-Errands-Live": "1"}
"""What static/app.js sends as a page refreshes itself."""


def test_the_pages_refreshes_share_their_read_models(dash_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    overviews, lists = _counting(monkeypatch, "overview"), _counting(monkeypatch, "list_jobs")
    dash_app.registry["mail"].enqueue("a@example.com")
    with _client(dash_app) as ada, _client(dash_app, 0) as uncached:
        login(ada)
        for _ in range(3):
            assert 'data-queue="mails" data-state="ready">1<' in ada.get("/", headers=LIVE).text
            assert "a@example.com" in ada.get("/jobs", headers=LIVE).text
        assert len(overviews) == 1 and len(lists) == 1
        assert ada.get("/api/overview", headers=LIVE).json()["totals"]["ready"] == 1  # the page's model
        assert len(overviews) == 1
        assert "a@example.com" not in ada.get("/jobs?queue=default", headers=LIVE).text  # a model of its own
        assert len(lists) == 2
        assert ada.get("/api/overview?window=7d", headers=LIVE).status_code == 200 and len(overviews) == 2
        assert ada.get("/api/overview?window=1y", headers=LIVE).status_code == 400
        assert ada.get("/api/overview").status_code == 200 and len(overviews) == 3  # a program: read afresh
        ada.get("/")
        assert len(overviews) == 4  # a page opened or reloaded: a load after the click
        login(uncached)
        uncached.get("/", headers=LIVE)
        uncached.get("/", headers=LIVE)
        assert len(overviews) == 6  # cache_seconds=0: every request reads


def test_a_page_opened_after_a_change_made_elsewhere_shows_it(dash_app: Any) -> None:
    mail = dash_app.registry["mail"]
    with _client(dash_app) as ada:
        login(ada)
        assert 'data-queue="mails" data-state="ready">0<' in ada.get("/", headers=LIVE).text
        mail.enqueue("a@example.com")  # the CLI, a worker, the application: not through this dashboard
        assert 'data-queue="mails" data-state="ready">0<' in ada.get("/", headers=LIVE).text  # a refresh: cached
        assert 'data-queue="mails" data-state="ready">1<' in ada.get("/").text  # a reload: at once


def test_an_operators_own_change_shows_at_once(dash_app: Any) -> None:
    mail = dash_app.registry["mail"]
    job = mail.enqueue("a@example.com")
    with _client(dash_app) as ada:
        login(ada)
        assert f"/jobs/{job.id}" in ada.get("/jobs", headers=LIVE).text
        assert "paused" not in ada.get("/", headers=LIVE).text
        assert ada.post("/queues/mails/pause", data={"csrf": csrf(ada)}, follow_redirects=False).status_code == 303
        assert "⏸ paused" in ada.get("/", headers=LIVE).text
        assert ada.post(f"/jobs/{job.id}/cancel", data={"csrf": csrf(ada)}, follow_redirects=False).status_code == 303
        assert f"/jobs/{job.id}" not in ada.get("/jobs", headers=LIVE).text


def test_a_change_through_one_process_shows_at_once_in_another(dash_app: Any) -> None:
    """Two processes of the dashboard behind one address: the browser that paused a queue through
    the first reads past the second's cached overview, which predates the change."""
    with _client(dash_app) as first, _client(dash_app) as second:
        login(first)
        for name, value in first.cookies.items():
            second.cookies.set(name, value)
        assert "paused" not in second.get("/", headers=LIVE).text  # the second process caches it
        paused = first.post("/queues/mails/pause", data={"csrf": csrf(first)}, follow_redirects=False)
        assert paused.status_code == 303 and "errands_wrote" in paused.headers.get("set-cookie", "")
        other = TestClient(second.app, base_url="https://testserver")
        other.cookies.set("errands_session", first.cookies["errands_session"])
        assert "paused" not in other.get("/", headers=LIVE).text  # everyone else: the cached overview, for its lifetime
        second.cookies.set("errands_wrote", first.cookies["errands_wrote"])
        assert "⏸ paused" in second.get("/", headers=LIVE).text


def test_a_viewer_reads_the_same_models_but_draws_its_own_page(dash_app: Any) -> None:
    dash_app.registry["mail"].enqueue("a@example.com")
    ada = _client(dash_app)
    with ada, TestClient(ada.app, base_url="https://testserver") as vic:
        login(ada)
        login(vic, VIEWER, PASSWORD)
        assert "Bulk action" in ada.get("/jobs").text
        page = vic.get("/jobs").text
        assert "a@example.com" in page and "Bulk action" not in page
