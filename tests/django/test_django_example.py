"""examples/django_project run as its README says: migrate, a superuser, uvicorn serving it, an order
placed over HTTP, ``errands_worker --burst`` sending the receipt, and the dashboard reached through
the Django admin's login page."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import manage
from http_client import Browser

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_project"


def run(db_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=EXAMPLE, capture_output=True, text=True,
                          timeout=120, env={**_env(db_url), **env})
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stderr}"
    return done


def _env(db_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["EXAMPLE_DATABASE_URL"] = db_url
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[Browser]:
    """The example migrated, with a superuser, served by uvicorn on a free local port."""
    run(db_url, "migrate", "-v", "0")
    run(db_url, "createsuperuser", "--noinput", "--username", "ada", "--email", "ada@example.com",
        DJANGO_SUPERUSER_PASSWORD="change-me")
    port = _free_port()
    with open(tmp_path / "uvicorn.log", "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "mysite.asgi:application", "--lifespan", "off",
                                   "--host", "127.0.0.1", "--port", str(port)], cwd=EXAMPLE, env=_env(db_url),
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "uvicorn.log").read_text()
                time.sleep(0.1)
        yield Browser(server=("127.0.0.1", port))
    finally:
        server.terminate()
        server.wait(10)


def test_example_project_end_to_end(served: Browser, db_url: str) -> None:
    placed = served.post("/orders/", {"email": "bob@example.com", "total_cents": "1250"})
    assert placed.status == 201, placed.text
    order, task = json.loads(placed.body)["order"], json.loads(placed.body)["task"]
    waiting = json.loads(served.get(f"/orders/{order}/?task={task}").body)
    assert waiting["task"]["status"] == "READY" and waiting["receipt"] == ""
    assert served.post("/orders/", {"email": "bob@example.com"}).status == 400

    worker = manage(db_url, "errands_worker", "--burst", cwd=EXAMPLE, env_name="EXAMPLE_DATABASE_URL")
    assert worker.returncode == 0, worker.stderr
    done = json.loads(served.get(f"/orders/{order}/?task={task}").body)
    assert done["task"] == {"status": "SUCCESSFUL", "attempts": 1, "errors": [],
                            "return_value": f"Receipt for order {order}: 12.50 EUR, sent to bob@example.com"}
    assert done["receipt"] == done["task"]["return_value"]

    # The dashboard: strangers go to the admin's login page, which brings ada back as an admin.
    stranger = served.get("/errands/")
    assert stranger.status == 303 and stranger.location == "/admin/login/?next=/errands/"
    form = served.get(stranger.location)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token, form.text[:500]
    signed_in = served.post("/admin/login/?next=/errands/", {"username": "ada", "password": "change-me",
                                                              "next": "/errands/",
                                                              "csrfmiddlewaretoken": token.group(1)})
    assert signed_in.status == 302 and signed_in.location == "/errands/", signed_in.text[:500]
    page = served.get("/errands/queues")
    assert page.status == 200 and "ada" in page.text and "emails" in page.text
    assert json.loads(served.get("/errands/api/me").body)["role"] == "admin"
