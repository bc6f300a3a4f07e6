"""Issue 11, case 11: SQLite's durability is a choice, ``?synchronous=normal|full`` or
ERRANDS_SQLITE_SYNCHRONOUS, and ``errands doctor`` states what the mode in force means.

What is checked is the pragma SQLite reports on the store's own connections (``PRAGMA synchronous``:
1 normal, 2 full), never a timing: the cost of ``full`` is measured by ``make bench``.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli

from errands import Errands
from errands.core.errors import ConfigurationError
from errands.store.dialects.sqlite import SYNCHRONOUS_ENV, SQLiteDialect, synchronous_setting

NORMAL, FULL = 1, 2


def pragma(conn: Any) -> int:
    return int(conn.execute("PRAGMA synchronous").fetchone()[0])


def in_force(app: Errands) -> set[int]:
    """``PRAGMA synchronous`` on every kind of connection the store opens: this thread's, another
    thread's, and the idle worker's listener."""
    store = app.store
    seen = {store.db.run(lambda cur: int(cur.execute("PRAGMA synchronous").fetchone()[0]))}
    other: list[int] = []
    thread = threading.Thread(target=lambda: other.append(store.db.run(
        lambda cur: int(cur.execute("PRAGMA synchronous").fetchone()[0]))))
    thread.start()
    thread.join()
    seen.update(other)
    listener = store.listener()
    assert listener is not None
    try:
        seen.add(pragma(listener.conn))  # type: ignore[attr-defined]
    finally:
        listener.close()
    return seen


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv(SYNCHRONOUS_ENV, raising=False)
    return f"sqlite:///{tmp_path / 'errands.db'}"


@pytest.fixture
def opened() -> Any:
    apps: list[Errands] = []

    def open_app(url: str) -> Errands:
        app = Errands(url)
        app.migrate()
        apps.append(app)
        return app

    yield open_app
    for app in apps:
        app.close()


@pytest.mark.parametrize("query, expected, name", [
    ("", NORMAL, "normal"),
    ("?synchronous=normal", NORMAL, "normal"),
    ("?synchronous=full", FULL, "full"),
    ("?synchronous=FULL&busy_timeout=6000", FULL, "full"),
])
def test_the_url_option_sets_the_pragma_on_every_connection(url, opened, query, expected, name):
    app = opened(url + query)
    assert in_force(app) == {expected}
    store = app.store
    assert isinstance(store.dialect, SQLiteDialect) and store.dialect.synchronous == name


def test_the_variable_sets_it_and_the_url_wins(url, opened, monkeypatch):
    monkeypatch.setenv(SYNCHRONOUS_ENV, "full")
    assert in_force(opened(url)) == {FULL}
    assert opened(url).store.dialect.synchronous_from == SYNCHRONOUS_ENV
    assert in_force(opened(url + "?synchronous=normal")) == {NORMAL}  # one database's URL beats the process's
    monkeypatch.setenv(SYNCHRONOUS_ENV, " ")  # empty counts as unset, as for every ERRANDS_* variable
    assert in_force(opened(url)) == {NORMAL}
    assert opened(url).store.dialect.synchronous_from == "errands' default"


@pytest.mark.parametrize("value", ["off", "0", "extra", "fast", "2"])
def test_an_unknown_value_is_refused_naming_the_allowed_ones(url, monkeypatch, value):
    with pytest.raises(ConfigurationError, match=r"from \?synchronous= in the database URL is not allowed: "
                                                 r"use normal or full"):
        Errands(f"{url}?synchronous={value}").migrate()  # the store opens, and refuses, on first use
    monkeypatch.setenv(SYNCHRONOUS_ENV, value)
    with pytest.raises(ConfigurationError, match=f"from {SYNCHRONOUS_ENV} is not allowed: use normal or full"):
        synchronous_setting(url)


def test_off_is_refused_with_the_reason(url):
    with pytest.raises(ConfigurationError, match="off is refused: a power loss or OS crash could corrupt"):
        SQLiteDialect(url + "?synchronous=off")


def test_the_cli_refuses_a_bad_value_in_one_line_with_exit_78(url):
    done = run_cli(url + "?synchronous=sometimes", "status")
    assert done.returncode == 78 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == ["Error: SQLite synchronous='sometimes' from ?synchronous= in the database URL "
                                        "is not allowed: use normal or full"]
    done = run_cli(url, "status", **{SYNCHRONOUS_ENV: "sometimes"})
    assert done.returncode == 78 and f"from {SYNCHRONOUS_ENV} is not allowed" in done.stderr, done.stderr


# ---------------------------------------------------------------------- errands doctor
def doctor_check(url: str, **env: str) -> dict[str, Any]:
    run_cli(url, "migrate")
    done = run_cli(url, "doctor", "--json", **env)
    assert "Traceback" not in done.stderr, done.stderr
    found = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "sqlite_synchronous"]
    assert len(found) == 1, done.stdout
    return found[0]


def test_doctor_states_the_trade_off_of_normal(url):
    check = doctor_check(url)
    assert check["status"] == "info"
    assert check["data"] == {"synchronous": "normal", "configured": "normal", "set_by": "errands' default",
                             "journal_mode": "wal"}
    detail = check["detail"]
    assert detail.startswith("synchronous=normal (set by errands' default): a commit is not fsynced")
    assert "jobs survive a crash of any process" in detail
    assert "the last transactions committed before a power loss or OS crash may be lost" in detail
    assert "an enqueue that returned can vanish" in detail
    assert f"?synchronous=full in the URL or {SYNCHRONOUS_ENV}=full" in detail
    assert any("each process sets synchronous on its own connections" in item for item in check["items"])


def test_doctor_states_the_trade_off_of_full(url):
    check = doctor_check(url, **{SYNCHRONOUS_ENV: "full"})
    assert check["status"] == "ok"
    assert check["data"]["synchronous"] == "full" and check["data"]["set_by"] == SYNCHRONOUS_ENV
    assert "every commit fsyncs the WAL before it returns" in check["detail"]
    assert "an enqueue that returned survives a power loss or OS crash" in check["detail"]
    assert "one fsync per write transaction" in check["detail"]
    assert doctor_check(url + "?synchronous=full")["data"]["set_by"] == "?synchronous= in the database URL"


def test_doctor_prints_the_mode_on_its_own_line(url):
    run_cli(url, "migrate")
    done = run_cli(url + "?synchronous=full", "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(re.match(r"^(✓|\+) ok +synchronous +synchronous=full \(set by \?synchronous= in the database URL\): "
                        r"every commit fsyncs", line) for line in done.stdout.splitlines()), done.stdout
