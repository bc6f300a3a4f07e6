"""The dashboard's layout in Chromium (issue 15, points 10 and 11), and screenshots of every page.

One dashboard on a SQLite file with realistic data (tests/apps/dashboard_showcase.py: jobs in
several queues, a 100 KB argument, a dead-letter entry whose error is one 2,500-character word, a
stale job, a live and a dead worker, a finished workflow, periodic jobs, users, an audit trail) and
one Chromium for the whole module.

Screenshots of every page at 1,366 px and 360 px in the light and dark themes are written to
test-artifacts/screenshots/ (git-ignored; `make clean` removes them) by
test_screenshots_of_every_page_at_both_widths_in_both_themes, named <theme>-<width>-<page>.png.
"""

from __future__ import annotations

import re
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import APPS, drain, wait_for
from test_dashboard_in_chromium import CHROMIUM, MS, USER, Site, _Browser, _serving, log_in, playwright_api

pytestmark = pytest.mark.slow

SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
WIDE, NARROW = (1366, 900), (360, 740)
LONG_WORD = "A" * 2500
BIG = "<p>" + "lorem ipsum dolor sit amet " * 3800 + "</p>"  # about 100 KB, with markup characters


class Showcase(Site):
    """The browser tests' site, on the showcase app, filled once for the module."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.env["ERRANDS_APP"] = "dashboard_showcase:app"
        self.ids: dict[str, int] = {}

    def app(self):  # type: ignore[no-untyped-def]
        sys.path.insert(0, str(APPS))
        import dashboard_showcase

        dashboard_showcase.app.use_database(self.db)
        return dashboard_showcase.app

    def fill(self) -> None:
        from errands import group
        from errands.services import schedules

        app = self.app()
        r, store, d = app.registry, app.store, app.store.dialect
        # A finished workflow (drained here), then waiting jobs, newest last.
        wf = app.workflow("nightly-import")
        root = wf.add(r["pipeline_step"].prepare("extract"))
        mid = wf.add(group(*[r["pipeline_step"].prepare(f"load-{n}") for n in range(3)]), after=[root])
        wf.add(r["pipeline_step"].prepare("publish"), after=[mid])
        self.ids["workflow"] = wf.enqueue().id
        drain(app, queues=("pipelines",))
        # A job whose first attempt logged, checkpointed and failed: waiting for its retry.
        self.ids["imports"] = r["import_rows"].enqueue("orders").id
        drain(app, queues=("imports",))
        invoices = app.enqueue_many([r["send_invoice"].prepare(1000 + n, f"INV-2024-{n:04d}") for n in range(24)])
        app.enqueue_many([r["resize_image"].prepare(f"/uploads/{n}.jpg", [64, 256, 1024]) for n in range(8)])
        r["sync_customer"].using(delay=3600).enqueue(77, {"plan": "pro"})
        dead = [r["send_invoice"].enqueue(n, f"INV-2023-{n:04d}") for n in range(3)]
        word = r["sync_customer"].enqueue(12, {"id": 12})
        store.endings.bury(None, dead[0].id, "smtplib.SMTPRecipientsRefused",
                        "{'ops@example.com': (550, b'5.1.1 mailbox unavailable')}")
        store.endings.bury(None, dead[1].id, "TimeoutError", "the mail server did not answer within 30 s")
        store.endings.bury(None, dead[2].id, "TimeoutError", "the mail server did not answer within 30 s")
        store.endings.bury(None, word.id, "ValueError", f"could not parse the CRM's answer: {LONG_WORD}")
        # A worker that is alive, and one SIGKILLed 15 s ago with a 5 s lease, holding a job (now stale).
        host = socket.gethostname()
        store.workers.register("web-1:4242:a1b2c3", host, 4242, ["default", "emails", "media"], 8, 60.0, 20.0)
        store.workers.register("web-2:777:d4e5f6", host, 777, ["media"], 2, 5.0, 5 / 3)
        [held] = store.jobs.claim("web-2:777:d4e5f6", ["media"], 1, 5.0)

        def backdate(cur: Any) -> None:
            cur.execute(d.q("UPDATE {workers} SET heartbeat_at = {now_plus} WHERE id = {p}"),
                        (-15.0, "web-2:777:d4e5f6"))
            cur.execute(d.q("UPDATE {jobs} SET reserved_until = {now_plus} WHERE id = {p}"), (-10.0, held.id))

        store.db.run(backdate)
        app.pause_queue("reports")
        # Schedules stored in the database beside the code's two: one running, one paused.
        schedules.add_schedule(app, USER, "acme-invoice-digest", "send_invoice", "30 7 * * mon-fri",
                               timezone="America/New_York", args=[1042, "INV-DIGEST"], catch_up="all",
                               catch_up_limit=5)
        schedules.add_schedule(app, USER, "legacy-sync", "sync_customer", "0 */6 * * *", args=[7])
        schedules.set_schedule_paused(app, USER, "legacy-sync", True)
        store.accounts.audit(USER, "retry", "dead letter", "3 entries")
        store.accounts.audit(USER, "pause", "queue reports")
        self.cli("users", "create", "vic", "--role", "viewer", "--password", "another long password")
        # The two that test the layout, newest: shown first in the jobs list.
        self.ids["bidi"] = r["send_invoice"].enqueue(5, "\u202egnp.exe").id
        self.ids["big"] = r["sync_customer"].enqueue(42, {"html": BIG}).id
        self.ids["invoice"] = invoices[0].id
        self.ids["dead"] = dead[0].id
        self.ids["word"] = word.id
        store.close()


@pytest.fixture(scope="module")
def showcase(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Showcase]:
    s = Showcase(tmp_path_factory.mktemp("showcase"))
    s.fill()
    s.start("dashboard", "--port", str(s.port))
    wait_for(lambda: _serving(s.port), timeout=30, message="the dashboard to listen")
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[_Browser]:
    """One browser for every test of the module."""
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, timeout=30 * MS,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            yield _Browser(b)
        finally:
            b.close()


@pytest.fixture(scope="module")
def signed_in(showcase: Showcase, chromium: _Browser) -> Iterator[Any]:
    """A signed-in browser profile (theme: the OS's, light)."""
    context = chromium.new_context(viewport={"width": WIDE[0], "height": WIDE[1]}, color_scheme="light")
    log_in(context.new_page(), showcase)
    try:
        yield context
    finally:
        context.close()


def _size(page: Any) -> tuple[int, int]:
    return page.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")


def test_long_content_is_cut_in_lists_wrapped_and_shown_whole_on_the_job_page(showcase, signed_in):
    """Issue 15, point 10: a 2,500-character word widened the dead letter to 2,488 px at 1,366 px,
    100 KB of arguments made the jobs list 35,331 px tall, and arguments read as \\u003c escapes."""
    page = signed_in.new_page()
    page.goto(showcase.url + "/dead")
    width, _ = _size(page)
    assert width <= WIDE[0], width
    for header in ("Count", "Last"):  # the groups table's last columns stay on screen
        box = page.locator(f"th:has-text('{header}')").first.bounding_box()
        assert box is not None and box["x"] + box["width"] <= WIDE[0], (header, box)
    page.goto(showcase.url + "/jobs")
    width, height = _size(page)
    assert width <= WIDE[0], width
    assert height < 6000, height  # 36 rows
    big = page.locator(f"tr:has(a[href$='/jobs/{showcase.ids['big']}'])")
    box = big.bounding_box()
    assert box is not None and box["height"] < 200, box
    cell = big.locator("code.args").inner_text()
    assert '{"html": "<p>lorem ipsum' in cell and cell.endswith("…") and len(cell) < 300, cell[:400]
    assert "\\u003c" not in page.inner_text("main")
    bidi = page.locator(f"tr:has(a[href$='/jobs/{showcase.ids['bidi']}']) code.args").inner_text()
    assert '"\\u202egnp.exe"' in bidi and "\u202e" not in bidi, bidi  # a bidi control is still spelled out
    big.locator("a.args-more").click()  # "show all (…characters)": the job's page with all of it
    page.wait_for_url(re.compile(rf"/jobs/{showcase.ids['big']}\?all=1#arguments$"))
    assert "</p>" in page.inner_text("pre.args") and _size(page)[0] <= WIDE[0]
    page.goto(showcase.url + f"/jobs/{showcase.ids['big']}")
    assert "</p>" not in page.inner_text("pre.args")  # cut at 10,000 characters, with a link to the rest
    page.click("text=Show all")
    page.wait_for_url(re.compile(r"\?all=1$"))
    assert "</p>" in page.inner_text("pre.args")
    page.goto(showcase.url + f"/jobs/{showcase.ids['word']}")
    assert _size(page)[0] <= WIDE[0] and "A" * 1000 in page.inner_text("pre.error-text")  # wrapped, not cut
    page.set_viewport_size({"width": NARROW[0], "height": NARROW[1]})
    for path in ("/dead", "/jobs", f"/jobs/{showcase.ids['word']}"):
        page.goto(showcase.url + path)
        assert _size(page)[0] <= NARROW[0], path
    page.close()


DESTINATIONS = ["/", "/jobs", "/dead", "/stale", "/workers", "/queues", "/workflows", "/periodic", "/enqueue",
                "/audit", "/users"]


def test_an_attempts_log_lines_and_its_checkpoint_fit_both_widths(showcase, signed_in):
    """Issue 27, points 3 and 4: the job page shows what the failed attempt logged (one line a
    300-character word) and the checkpoint it stored, at 1,366 px and at 360 px."""
    page = signed_in.new_page()
    page.goto(showcase.url + f"/jobs/{showcase.ids['imports']}")
    text = page.locator("body").text_content() or ""
    assert "copied rows up to 3000" in text and "price that is no number" in text, text
    assert '"after_id": 3000' in text or '"after_id":3000' in text, text
    for width, height in (WIDE, NARROW):
        page.set_viewport_size({"width": width, "height": height})
        assert _size(page)[0] <= width, width
    page.close()


def test_navigation_is_one_line_wide_and_every_destination_reachable_on_a_phone(showcase, signed_in):
    """Issue 15, point 11: at 1,366 px the admin's navigation wrapped onto two lines; at 360 px the
    bottom bar held 10 items in 580 px, four of them off-screen with no hint."""
    page = signed_in.new_page()
    page.goto(showcase.url + "/")
    tops = page.evaluate("[...document.querySelectorAll('nav.nav > a, nav.nav > details > summary')]"
                         ".filter(e => e.offsetParent).map(e => Math.round(e.getBoundingClientRect().top))")
    assert len(tops) >= 5 and len(set(tops)) == 1, tops  # one line
    header = page.locator("header.top").bounding_box()
    assert header is not None and header["height"] < 60, header  # brand, navigation and account: one row
    for href in DESTINATIONS:  # every destination is a click or two away, on the desktop too
        _reach(page, showcase, href, WIDE[0], WIDE[1])
    page.set_viewport_size({"width": NARROW[0], "height": NARROW[1]})
    page.goto(showcase.url + "/")
    nav = page.evaluate("(() => { const n = document.querySelector('nav.nav'); "
                        "return [n.scrollWidth, n.clientWidth, getComputedStyle(n).position]; })()")
    assert nav[0] <= nav[1] and nav[2] == "fixed", nav  # nothing hidden in a scrolling bar
    for href in DESTINATIONS:
        _reach(page, showcase, href, NARROW[0], NARROW[1])
        assert _size(page)[0] <= NARROW[0], href
    # The menu from the keyboard: Tab to "More", Enter opens it, Tab reaches its links, Escape closes it.
    page.goto(showcase.url + "/")
    page.focus("nav.nav details.more > summary")
    page.keyboard.press("Enter")
    assert page.locator("nav.nav .menu a[href$='/audit']").is_visible()
    for _ in range(8):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.getAttribute('href')") == "/audit":
            break
    else:
        raise AssertionError("Tab never reached Audit in the open menu")
    page.keyboard.press("Escape")
    assert not page.locator("nav.nav .menu a[href$='/audit']").is_visible()
    page.close()


def _reach(page: Any, site: Showcase, href: str, width: int, height: int) -> None:
    """Go to ``href`` from the overview by clicking what a person sees: its link in the bar, or
    "More" and then its link; each fully inside the window."""
    page.goto(site.url + "/")
    link = page.locator(f"nav.nav > a[href='{href}']")
    if not (link.count() and link.is_visible()):
        page.click("nav.nav details.more > summary")
        link = page.locator(f"nav.nav .menu a[href='{href}']")
    box = link.bounding_box()
    assert box is not None and link.is_visible(), (href, width)
    inside = box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= width and box["y"] + box["height"] <= height
    assert inside, (href, width, box)
    link.click()
    page.wait_for_url(site.url + href)


PAGES = {"login": "/login", "overview": "/", "jobs": "/jobs", "job": "/jobs/{invoice}", "dead-letter": "/dead",
         "dead-job": "/jobs/{dead}", "stale": "/stale", "workers": "/workers", "queues": "/queues",
         "periodic": "/periodic", "enqueue": "/enqueue", "audit": "/audit", "users": "/users",
         "workflows": "/workflows", "workflow": "/workflows/{workflow}", "job-logs": "/jobs/{imports}"}


def test_screenshots_of_every_page_at_both_widths_in_both_themes(showcase, chromium):
    """Written to test-artifacts/screenshots/<theme>-<width>-<page>.png for people to look at; the
    test checks only that no page scrolls sideways and that each file was written."""
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    for theme in ("light", "dark"):
        context = chromium.new_context(viewport={"width": WIDE[0], "height": WIDE[1]}, color_scheme=theme)
        page = context.new_page()
        for name, path in PAGES.items():
            if name == "overview":
                log_in(page, showcase)
            page.goto(showcase.url + path.format(**showcase.ids))
            for width, height in (WIDE, NARROW):
                page.set_viewport_size({"width": width, "height": height})
                assert _size(page)[0] <= width, (theme, width, name)
                page.screenshot(path=str(SCREENSHOTS / f"{theme}-{width}-{name}.png"), full_page=True,
                                animations="disabled")
            page.set_viewport_size({"width": WIDE[0], "height": WIDE[1]})
        context.close()
    written = sorted(p.name for p in SCREENSHOTS.glob("*.png"))
    assert len(written) == 2 * 2 * len(PAGES), written
