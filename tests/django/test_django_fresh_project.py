"""docs/integrations/django.md followed on a new project, and only that page: ``django-admin
startproject``, its settings, tasks and ``asgi.py`` blocks as the page shows them, ``manage.py
migrate``, a task enqueued from ``manage.py shell``, ``manage.py errands_worker --burst``, then the
dashboard under uvicorn reached through the login page ``LOGIN_URL`` names, by a staff user.

The page's code blocks are read from the Markdown file, so this test fails when the page goes
wrong.  Run by ``make test-django6`` with Django 6 (and by the main suite with the installed
Django and the backport).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from helpers import free_port, scaled, wait_for
from http_client import Browser

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations" / "django.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
FILE_COMMENT = re.compile(r"#\s*([\w./-]+\.py)(\s+\(append\))?\s*$")
POSTGRES_SETTINGS = "# myproject/settings.py, for PostgreSQL"
STAFF = ("sam", "a-staff-password-1")


def blocks(language: str) -> list[str]:
    return [code for lang, code in FENCE.findall(PAGE.read_text()) if lang == language]


def shell_lines() -> list[list[str]]:
    """The page's set-up commands: ``django-admin startproject`` and ``manage.py startapp``."""
    found = []
    for code in blocks("sh"):
        for line in code.splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["django-admin", "startproject"] or words[:3] == ["python", "manage.py", "startapp"]:
                found.append(words)
    assert [w[1] for w in found] == ["startproject", "manage.py"], found
    return found


def apply_page(project: Path, backend: str) -> None:
    """What a reader does with the page: the commands, then each file block written or appended."""
    for words in shell_lines():
        command = [sys.executable, "-m", "django", *words[1:]] if words[0] == "django-admin" \
            else [sys.executable, *words[1:]]
        done = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=scaled(60))
        assert done.returncode == 0, f"{line_of(words)}:\n{done.stderr}"
    postgres_block = None
    for code in blocks("python"):
        first = code.split("\n", 1)[0].strip()
        if first.startswith(POSTGRES_SETTINGS):
            postgres_block = code
            continue
        match = FILE_COMMENT.fullmatch(first)
        if not match:
            continue  # a session block (the page's own test runs those)
        target = project / match.group(1)
        if match.group(2):
            assert target.is_file(), f"the page appends to {match.group(1)}, which startproject did not make"
            target.write_text(target.read_text() + "\n" + code)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(code)
    assert postgres_block is not None, f"no block starting {POSTGRES_SETTINGS!r} on the page"
    if backend == "postgres":
        settings = project / "myproject" / "settings.py"
        settings.write_text(settings.read_text() + "\n" + postgres_block)


def line_of(words: list[str]) -> str:
    return " ".join(words)


def libpq_env(db_url: str) -> dict[str, str]:
    """The test database (a schema of its own) as the libpq variables the page's PostgreSQL block reads."""
    parts = urlsplit(db_url)
    options = parse_qs(parts.query).get("options", [""])[0]
    return {"PGDATABASE": parts.path.lstrip("/"), "PGUSER": parts.username or "", "PGPASSWORD": parts.password or "",
            "PGHOST": parts.hostname or "", "PGPORT": str(parts.port or 5432), "PGOPTIONS": options}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def project(backend: str, db_url: str, tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    folder = tmp_path / "site"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ERRANDS_", "DJANGO_", "PG")) and k != "DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    if backend == "postgres":
        env.update(libpq_env(db_url))
    apply_page(folder, backend)
    yield folder, env


def manage(project: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    folder, env = project
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=scaled(120))
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def shell(project: tuple[Path, dict[str, str]], code: str) -> Any:
    """``manage.py shell -c``; the last line it prints, read as JSON."""
    out = manage(project, "shell", "-v", "0", "-c", code).stdout.strip().splitlines()
    return json.loads(out[-1])


def test_a_new_project_set_up_by_the_page_runs_tasks_and_serves_the_dashboard(
        project: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    manage(project, "check")
    manage(project, "migrate", "-v", "0")
    ids = shell(project, "import json\n"
                         "from django.contrib.auth.models import User\n"
                         "from shop.tasks import send_welcome, total\n"
                         f"User.objects.create_user({STAFF[0]!r}, 'sam@example.com', {STAFF[1]!r}, is_staff=True)\n"
                         "ok, bad = total.enqueue([250, 1000]), total.enqueue([5, -1])\n"
                         "mail = send_welcome.enqueue(User.objects.get().pk)\n"
                         "print(json.dumps([ok.id, bad.id, mail.id]))")
    worker = manage(project, "errands_worker", "--burst")
    log = worker.stdout + worker.stderr
    assert log.count("Traceback (most recent call last)") == 1, log  # the failure's, once
    results = shell(project, "import json\n"
                             "from shop.tasks import send_welcome, total\n"
                             f"ok, bad, mail = total.get_result({ids[0]}), total.get_result({ids[1]}), "
                             f"send_welcome.get_result({ids[2]})\n"
                             "print(json.dumps([ok.status, ok.return_value, bad.status, mail.return_value]))")
    assert results == ["SUCCESSFUL", 1250, "FAILED", "welcome mail sent to sam@example.com"]
    status = json.loads(manage(project, "errands_status", "--json").stdout)
    assert status["queues"]["default"]["failed"] == 1, status

    # The dashboard as asgi.py mounts it, under uvicorn: a stranger goes to LOGIN_URL (the admin's login
    # page, which startproject routed), and a staff user who signs in there comes back as a viewer.
    folder, env = project
    port = free_port()
    with open(tmp_path / "uvicorn.log", "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "myproject.asgi:application", "--host",
                                   "127.0.0.1", "--port", str(port)], cwd=folder, env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        def listening() -> bool:
            assert server.poll() is None, (tmp_path / "uvicorn.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=scaled(1)).close()
                return True
            except OSError:
                return False

        wait_for(listening, interval=0.1, message="uvicorn to listen")
        browser = Browser(server=("127.0.0.1", port))
        stranger = browser.get("/errands/")
        assert stranger.status == 303 and stranger.location == "/admin/login/?next=/errands/", stranger.text[:300]
        form = browser.get(stranger.location)
        assert form.status == 200, form.text[:500]  # a login page that renders (no TemplateDoesNotExist)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert token, form.text[:500]
        signed_in = browser.post("/admin/login/?next=/errands/", {
            "username": STAFF[0], "password": STAFF[1], "next": "/errands/", "csrfmiddlewaretoken": token.group(1)})
        assert signed_in.status == 302 and signed_in.location == "/errands/", signed_in.text[:500]
        page = browser.get("/errands/queues")
        assert page.status == 200 and "emails" in page.text, page.text[:500]
        assert json.loads(browser.get("/errands/api/me").body)["role"] == "viewer"
    finally:
        server.terminate()
        server.wait(scaled(10))
