"""The dashboard as a person uses it: headless Chromium (Debian's, driven by Playwright).

A real `errands dashboard` and a real `errands worker` run on a SQLite file. Screenshots
of each step are saved under test-artifacts/browser/.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import APPS, SRC, drain, scaled, wait_for

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
USER, PASSWORD = "ada", "correct horse battery"
MS = scaled(1000)  # Playwright counts in milliseconds: one second, scaled

playwright_api = pytest.importorskip("playwright.sync_api")
if not os.path.exists(CHROMIUM):
    pytest.skip("Chromium is not installed: `make test` installs Debian's chromium (apt-get install chromium)",
                allow_module_level=True)

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Site:
    def __init__(self, tmp: Path) -> None:
        self.db = f"sqlite:///{tmp / 'browser.db'}"
        self.tmp = tmp
        self.port = _port()
        self.url = f"http://localhost:{self.port}"
        self.env = dict(os.environ, ERRANDS_DATABASE_URL=self.db, ERRANDS_APP="dashboard_jobs:app",
                        PYTHONPATH=os.pathsep.join([str(APPS), str(SRC), os.environ.get("PYTHONPATH", "")]))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.cli("migrate")
        self.cli("users", "create", USER, "--role", "admin", "--password", PASSWORD)

    def cli(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "errands", *args], env=self.env, capture_output=True, text=True,
                              timeout=scaled(60))
        assert done.returncode == 0, done.stderr
        return done.stdout

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{args[0]}-{len(self.procs)}.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "errands", *args], env=self.env, stdout=log,
                                stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def app(self):  # type: ignore[no-untyped-def]
        import dashboard_jobs

        dashboard_jobs.app.use_database(self.db)
        return dashboard_jobs.app

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=scaled(30))
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path)
    s.start("dashboard", "--port", str(s.port))
    wait_for(lambda: _serving(s.port), timeout=30, message="the dashboard to listen")
    try:
        yield s
    finally:
        s.stop()


def _serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=scaled(0.5)):
            return True
    except OSError:
        return False


class _Browser:
    """The browser, whose pages and contexts wait up to Playwright's 30 s default times the suite's scale."""

    def __init__(self, browser: Any) -> None:
        self._browser = browser

    def new_page(self, **options: Any) -> Any:
        page = self._browser.new_page(**options)
        page.set_default_timeout(30 * MS)
        return page

    def new_context(self, **options: Any) -> Any:
        context = self._browser.new_context(**options)
        context.set_default_timeout(30 * MS)
        return context


@pytest.fixture
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, timeout=30 * MS,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            yield _Browser(b)
        finally:
            b.close()


def shot(page: object, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


def log_in(page: object, site: Site) -> None:
    page.goto(site.url + "/")  # type: ignore[attr-defined]
    page.fill("input[name=username]", USER)  # type: ignore[attr-defined]
    page.fill("input[name=password]", PASSWORD)  # type: ignore[attr-defined]
    page.click("button[type=submit]")  # type: ignore[attr-defined]
    page.wait_for_selector("h1:has-text('Overview')")  # type: ignore[attr-defined]


def test_log_in_and_watch_counters_change_as_a_worker_runs(site, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    with page.expect_response(lambda r: "favicon" in r.url, timeout=10 * MS) as icon:
        page.goto(site.url + "/jobs")
    assert "/login" in page.url  # deep links need a login first
    # Issue 26: the browser's own request for the icon answered 404, a console error on every page.
    # Pages link their icon; /favicon.ico (asked for where no page links one) answers too.
    assert (icon.value.url, icon.value.status) == (site.url + "/static/favicon.svg", 200)
    assert page.request.get(site.url + "/favicon.ico").status == 200
    assert errors == []
    shot(page, "01-login")
    log_in(page, site)
    site.cli("enqueue", "quick", "--args", "[0]")
    site.cli("enqueue", "quick", "--args", "[1]")
    app = site.app()
    app.enqueue_many([app.registry["quick"].prepare(n) for n in range(38)])  # quicker than 38 CLI calls
    page.reload()
    ready = page.locator("[data-total=ready]")
    assert ready.inner_text() == "40"
    assert page.locator("#no-worker").is_visible()  # "no worker is running"
    shot(page, "02-overview-before-worker")
    site.start("worker", "-c", "4")
    # No reload: the page polls every 2 s and the counter drops while the worker drains the queue.
    expect = playwright_api.expect  # waits without evaluating strings, which the page's CSP forbids
    expect(ready).to_have_text("0", timeout=60 * MS)
    expect(page.locator("#no-worker")).to_be_hidden(timeout=30 * MS)
    # Workers add their runs to the per-minute stats every few seconds; the text and the chart follow live.
    expect(page.locator("[data-total=succeeded_window]")).to_have_text("40", timeout=30 * MS)
    expect(page.locator("[data-chart] .tp-ok").first).to_be_attached(timeout=10 * MS)
    shot(page, "03-overview-after-worker")
    assert not [e for e in errors if "Content Security Policy" in e], errors
    app.store.close()


def test_retry_a_dead_job_and_open_its_deep_link(site, browser, tmp_path):
    flag = tmp_path / "fixed"
    app = site.app()
    handle = app.enqueue_many([app.registry["fixable"].prepare(str(flag))])[0]
    site.start("worker", "-c", "2")
    wait_for(lambda: app.failed(), timeout=60, message="the job to land in the dead letter")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, site)
    page.goto(site.url + "/dead")
    assert "<b>not fixed yet</b>" in page.inner_text("table")  # untrusted error text shows as text
    shot(page, "04-dead-letter")
    flag.write_text("ok")
    page.check(f"input[name=id][value='{handle.id}']")
    page.click("button:has-text('Retry selected')")
    page.wait_for_selector("text=Retry 1 dead-letter entry?")
    shot(page, "05-confirm-retry")
    page.click("button:has-text('Yes, retry 1')")
    page.wait_for_url("**/dead?**")
    wait_for(lambda: not app.failed() and app.job_state(handle.id).value == "finished", timeout=60,
             message="the retried job to run")
    stranger = browser.new_page()  # another browser profile: no session, so the link asks for a login
    stranger.goto(site.url + f"/jobs/{handle.id}")
    assert "/login" in stranger.url
    tab = context.new_page()  # a new tab of the signed-in browser opens the shared link directly
    tab.goto(site.url + "/dead?name=fixable")
    tab.goto(site.url + "/audit")
    assert "retry" in tab.inner_text("table")
    other = app.registry["fixable"].using(delay=3600).enqueue(str(flag))
    tab.goto(site.url + f"/jobs/{other.id}")
    assert f"Job {other.id}" in tab.inner_text("h1") and "scheduled for later" in tab.inner_text(".why")
    shot(tab, "06-deep-link-job")
    app.store.close()


def test_theme_toggle_and_phone_layout(site, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900}, color_scheme="light")
    log_in(page, site)
    assert page.get_attribute("html", "data-theme") is None  # follows the OS by default
    page.select_option("#theme-select", "dark")
    page.wait_for_selector("html[data-theme=dark]")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(17, 19, 24)", background
    shot(page, "07-dark-theme")
    page.reload()
    assert page.get_attribute("html", "data-theme") == "dark"  # saved with the account
    phone = browser.new_page(viewport={"width": 360, "height": 740})
    log_in(phone, site)
    for path in ("/", "/jobs", "/dead", "/workers", "/queues", "/enqueue", "/users"):
        phone.goto(site.url + path)
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 360, (path, width)  # no horizontal scrolling at 360 px
    nav = phone.evaluate("getComputedStyle(document.querySelector('nav.nav')).position")
    assert nav == "fixed"  # bottom navigation on phones
    phone.goto(site.url + "/")
    shot(phone, "08-phone-overview")
    phone.keyboard.press("Tab")
    focused = phone.evaluate("document.activeElement.className")
    assert focused == "skip"  # the first Tab reaches "Skip to content", visibly


def test_workflow_page_at_desktop_and_phone_widths_in_both_themes(site, browser, tmp_path):
    from errands import group

    app = site.app()
    quick, fixable = app.registry["quick"], app.registry["fixable"]
    wf = app.workflow("nightly")
    root = wf.add(quick.prepare(0))
    crowd = wf.add(group(*[quick.prepare(n) for n in range(1, 46)]), after=[root])  # 45 steps: one box
    broken = wf.add(fixable.prepare(str(tmp_path / "never")), after=[crowd])
    wf.add(quick.prepare(99), after=[broken])
    handle = wf.enqueue()
    drain(app, concurrency=4)
    succeeded = {"light": "rgb(27, 127, 59)", "dark": "rgb(99, 211, 138)"}  # --succeeded of each theme
    errors: list[str] = []
    for scheme in ("light", "dark"):
        context = browser.new_context(viewport={"width": 1366, "height": 900}, color_scheme=scheme)
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        log_in(page, site)
        for width, height in ((1366, 900), (360, 740)):
            page.set_viewport_size({"width": width, "height": height})
            page.goto(site.url + f"/workflows/{handle.id}")
            assert page.locator("svg.wf-graph a.wf-node").count() == 4
            assert page.locator("svg.wf-graph a.wf-aggregate").count() == 1
            assert page.locator("svg.wf-graph").is_visible()
            stroke = page.evaluate("getComputedStyle(document.querySelector('.wf-node.state-succeeded .box')).stroke")
            assert stroke == succeeded[scheme], (scheme, stroke)
            scroll = page.evaluate("document.documentElement.scrollWidth")
            assert scroll <= width, (scheme, width, scroll)  # the graph scrolls inside its own box
            shot(page, f"09-workflow-{scheme}-{width}")
            page.goto(site.url + "/workflows")
            assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.goto(site.url + f"/jobs/{broken.job.id}")
        page.click(f"a:has-text('Workflow #{handle.id}')")
        page.wait_for_url(f"**/workflows/{handle.id}")
        assert not [e for e in errors if "Content Security Policy" in e], errors
        context.close()
    app.store.close()


def test_bidi_and_invisible_characters_show_spelled_out(site, browser):
    """Issue 15: "\u202egnp.exe" must not read as "exe.png" in a name, an argument or a user name."""
    app = site.app()
    handle, other = app.enqueue_many([app.registry["fixable"].prepare("\u202egnp.exe"),
                                      app.registry["quick"].prepare("a\u200bd\u2066a\u2069")])
    site.cli("users", "create", "mal\u202eory", "--role", "viewer", "--password", PASSWORD)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, site)
    for path, shown in ((f"/jobs/{handle.id}", ("\\u202egnp.exe",)),
                        (f"/jobs/{other.id}", ("a\\u200bd\\u2066a\\u2069",)),
                        ("/jobs?queue=default", ("\\u202egnp.exe",)), ("/users", ("mal\\u202eory",))):
        page.goto(site.url + path)
        text = page.inner_text("main")
        for spelled in shown:
            assert spelled in text, (path, spelled)
        hidden = [c for c in text if c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u200e\u200f"]
        assert not hidden, (path, hidden)
    shot(page, "09-bidi-spelled-out")
    app.store.close()
