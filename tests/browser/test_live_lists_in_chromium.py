"""Issue 15, point 12 c: the jobs, dead-letter and workers pages refresh themselves in Chromium
without losing the operator's filter, scroll or a half-typed form, and the Live switch pauses them."""

from __future__ import annotations

import time

from test_dashboard_in_chromium import MS, browser, log_in, playwright_api, shot, site  # noqa: F401

REFRESH = 5  # seconds between refreshes (live_toggle.html)


def _rows(page):  # type: ignore[no-untyped-def]
    return page.locator("[data-refresh-region] tbody tr")


def test_the_jobs_list_refreshes_keeps_a_half_typed_form_and_pauses(site, browser):  # noqa: F811
    app = site.app()
    quick = app.registry["quick"]
    app.enqueue_many([quick.prepare(n) for n in range(3)])
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    log_in(page, site)
    page.goto(site.url + "/jobs?queue=default")
    expect = playwright_api.expect
    expect(_rows(page)).to_have_count(3)
    app.enqueue_many([quick.prepare(n) for n in range(2)])
    expect(_rows(page)).to_have_count(5, timeout=(REFRESH * 3) * MS)  # no reload: the list refreshed itself
    assert "queue=default" in page.url and page.input_value("input[name=queue]") == "default"
    shot(page, "20-jobs-live")

    page.fill("input[name=name]", "qui")  # a half-typed filter: nothing may wipe it or the list under it
    app.enqueue_many([quick.prepare(9)])
    time.sleep(REFRESH + 2)
    assert page.input_value("input[name=name]") == "qui"
    expect(_rows(page)).to_have_count(5)

    page.reload()
    page.uncheck("#live-refresh")  # paused: nothing changes...
    expect(_rows(page)).to_have_count(6)
    app.enqueue_many([quick.prepare(10)])
    time.sleep(REFRESH + 2)
    expect(_rows(page)).to_have_count(6)
    page.reload()  # ...and it stays paused on this page after a reload
    assert not page.is_checked("#live-refresh")
    page.check("#live-refresh")
    app.enqueue_many([quick.prepare(11)])
    expect(_rows(page)).to_have_count(8, timeout=(REFRESH * 3) * MS)
    assert not [e for e in errors if "Content Security Policy" in e], errors
    app.store.close()


def test_a_refresh_keeps_the_scroll_position(site, browser):  # noqa: F811
    app = site.app()
    quick = app.registry["quick"]
    app.enqueue_many([quick.prepare(n) for n in range(45)])
    page = browser.new_page(viewport={"width": 1366, "height": 600})
    log_in(page, site)
    page.goto(site.url + "/jobs")
    page.mouse.wheel(0, 900)
    page.wait_for_function("() => window.scrollY > 300")
    before = page.evaluate("() => window.scrollY")
    stamp = page.evaluate("() => document.body.dataset.refreshedAt || ''")
    app.enqueue_many([quick.prepare(99)])
    page.wait_for_function(f"() => (document.body.dataset.refreshedAt || '') !== '{stamp}'",
                           timeout=(REFRESH * 3) * MS)
    assert abs(page.evaluate("() => window.scrollY") - before) < 5
    app.store.close()


def test_the_workers_page_shows_a_new_worker_and_its_activity_live(site, browser):  # noqa: F811
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    log_in(page, site)
    page.goto(site.url + "/workers")
    expect = playwright_api.expect
    expect(page.locator("[data-refresh-region='workers']")).to_contain_text("No worker is registered")
    site.start("worker", "-c", "2")
    expect(page.locator("[data-refresh-region='workers']")).to_contain_text("alive", timeout=30 * MS)
    expect(page.locator(".activity")).to_contain_text("Running now")
    shot(page, "21-workers-live")
