"""examples/django_project run as its README says: migrate, a superuser, uvicorn serving it, an order
placed over HTTP, ``errands_worker --burst`` sending the receipt, and the dashboard reached through
the Django admin's login page."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import manage, project_env
from helpers import free_port, scaled, wait_for
from http_client import Browser

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_project"
ENV_NAME = "EXAMPLE_DATABASE_URL"


def run(db_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``manage.py ...`` of the example, which must succeed."""
    done = manage(db_url, *args, cwd=EXAMPLE, env_name=ENV_NAME, extra_env=env)
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stderr}"
    return done


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[Browser]:
    """The example migrated, with a superuser, served by uvicorn on a free local port."""
    run(db_url, "migrate", "-v", "0")
    run(db_url, "createsuperuser", "--noinput", "--username", "ada", "--email", "ada@example.com",
        DJANGO_SUPERUSER_PASSWORD="change-me")
    port = free_port()
    with open(tmp_path / "uvicorn.log", "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "mysite.asgi:application", "--lifespan", "off",
                                   "--host", "127.0.0.1", "--port", str(port)], cwd=EXAMPLE,
                                  env=project_env(db_url, ENV_NAME), stdout=log, stderr=subprocess.STDOUT)
    try:
        def listening() -> bool:
            assert server.poll() is None, (tmp_path / "uvicorn.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=scaled(1)).close()
                return True
            except OSError:
                return False

        wait_for(listening, interval=0.1, message="uvicorn to listen")
        yield Browser(server=("127.0.0.1", port))
    finally:
        server.terminate()
        server.wait(scaled(10))


def test_example_project_end_to_end(served: Browser, db_url: str) -> None:
    placed = served.post("/orders/", {"email": "bob@example.com", "total_cents": "1250"})
    assert placed.status == 201, placed.text
    order, task = json.loads(placed.body)["order"], json.loads(placed.body)["task"]
    waiting = json.loads(served.get(f"/orders/{order}/?task={task}").body)
    assert waiting["task"]["status"] == "READY" and waiting["receipt"] == ""
    assert served.post("/orders/", {"email": "bob@example.com"}).status == 400
    # What the model refuses is the client's mistake (400), not a constraint error from the database (500).
    negative = served.post("/orders/", {"email": "bob@example.com", "total_cents": "-5"})
    assert negative.status == 400 and "total_cents" in json.loads(negative.body)["error"], negative.text
    bad_address = served.post("/orders/", {"email": "not an address", "total_cents": "5"})
    assert bad_address.status == 400 and "email" in json.loads(bad_address.body)["error"], bad_address.text
    assert served.get(f"/orders/{order + 1}/").status == 404  # neither was saved

    worker = manage(db_url, "errands_worker", "--burst", cwd=EXAMPLE, env_name=ENV_NAME)
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
