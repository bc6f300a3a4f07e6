"""Hostile input to the CLI, on every backend (issue 11): ids no backend can hold are usage errors,
5,000 nested brackets in ``--args`` are refused, and whatever a row holds (a payload that is no
JSON, nests 100,000 deep or is no UTF-8; names and errors that are no UTF-8) is shown by
``errands job show`` and ``errands failed list`` instead of crashing them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import invoke_cli, run_cli

from errands import Errands
from errands.core.limits import ID_MAX, MAX_DELAY
from errands.core.payload import MAX_DEPTH

GOOD_PAYLOAD = '{"args":[1],"kwargs":{}}'


class Sql(str):
    """A column value written into the statement as an SQL expression, not sent as a parameter."""


@pytest.fixture
def migrated(db_url: str) -> Iterator[tuple[str, Errands]]:
    app = Errands(db_url)
    app.migrate()
    try:
        yield db_url, app
    finally:
        app.store.close()


def insert_row(app: Errands, table: str, **columns: Any) -> int:
    store = app.store
    names, marks, params = [], [], []
    for column, value in columns.items():
        names.append(column)
        if isinstance(value, Sql):
            marks.append(str(value))
        else:
            marks.append("{p}")
            params.append(value)
    statement = store.dialect.q(f"INSERT INTO {{{table}}} ({', '.join(names)}) VALUES ({', '.join(marks)})")

    def insert(cur: Any) -> int:
        cur.execute(statement, params)
        cur.execute(store.dialect.q(f"SELECT MAX(id) FROM {{{table}}}"))
        return int(cur.fetchone()[0])

    return store.db.run(insert, write=True)


def insert_job(app: Errands, **columns: Any) -> int:
    row: dict[str, Any] = {"queue": "default", "name": "sample_jobs.sleep_then_record", "payload": GOOD_PAYLOAD,
                           "priority": 0, "attempts": 0, "max_attempts": 3, "available_at": Sql("{now}"),
                           "created_at": Sql("{now}")}
    row.update(columns)
    return insert_row(app, "jobs", **row)


_next_failed = [7000]


def insert_failed(app: Errands, **columns: Any) -> int:
    _next_failed[0] += 1
    row: dict[str, Any] = {"id": _next_failed[0], "queue": "default", "name": "sample_jobs.sleep_then_record",
                           "payload": GOOD_PAYLOAD, "priority": 0, "attempts": 3, "max_attempts": 3,
                           "created_at": Sql("{now}"), "failed_at": Sql("{now}"), "error_type": "RuntimeError",
                           "error_message": "it broke"}
    row.update(columns)
    return insert_row(app, "failed", **row)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _invalid_utf8(text: str) -> Sql:
    """``text`` with the byte 0xE9 (no UTF-8 on its own) after it, as SQLite TEXT."""
    return Sql(f"CAST(X'{text.encode().hex()}E9' AS TEXT)")


def _bad_payloads(backend: str) -> dict[str, Any]:
    payloads: dict[str, Any] = {
        "not JSON": '{"args": [1,',
        "100,000 deep": '{"args": [' + _nested(100_000) + "]}",
        "NaN": '{"args": [NaN, Infinity], "kwargs": {}}',
        "lone surrogate escape": '{"args": ["caf\\udce9"], "kwargs": {}}',
    }
    if backend == "sqlite":
        payloads["not UTF-8"] = Sql("CAST(X'7B2261726773223A5B22636166E9225D7D' AS TEXT)")
    return payloads


def ok(done: Any, what: Any = "") -> str:
    assert done.returncode == 0, (what, done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, (what, done.stderr[-2000:])
    return str(done.stdout)


# ---------------------------------------------------------------------------------- ids
COMMANDS = [["job", "show"], ["job", "cancel"], ["failed", "retry"], ["failed", "forget"], ["batch"]]


def test_ids_no_backend_can_hold_are_usage_errors(migrated):
    url, app = migrated
    entry = insert_failed(app)
    for command in COMMANDS:
        for job_id in (str(ID_MAX + 1), "0", "-1"):
            done = invoke_cli(url, *command, "--", job_id)  # refused while parsing: no process needed
            assert done.returncode == 2, (command, job_id, done.returncode, done.stderr[-2000:])
            assert "Traceback" not in done.stderr and "Invalid value" in done.stderr, (command, job_id, done.stderr)
            assert f"1<=x<={ID_MAX}" in done.stderr, done.stderr
    # The largest id there can be is an id: refused as one that names nothing, not as a usage error.
    missing = run_cli(url, "job", "show", str(ID_MAX))
    assert missing.returncode == 1 and "is in no table" in missing.stderr, missing.stderr
    assert [r.id for r in app.failed()] == [entry]


# ---------------------------------------------------------------------------------- stored payloads
def test_job_show_and_failed_list_show_any_stored_payload(migrated, backend):
    url, app = migrated
    jobs = {what: insert_job(app, payload=payload) for what, payload in _bad_payloads(backend).items()}
    entries = {what: insert_failed(app, payload=payload) for what, payload in _bad_payloads(backend).items()}
    for what, job_id in jobs.items():
        text = ok(run_cli(url, "job", "show", str(job_id)), what)
        assert "arguments:" in text, (what, text)
        shown = json.loads(ok(run_cli(url, "job", "show", "--json", str(job_id)), what))
        assert shown["id"] == job_id
        if what in ("not JSON", "100,000 deep", "not UTF-8"):
            assert isinstance(shown["arguments"], str), what  # the stored text, shown as text
        if what == "not UTF-8":
            assert shown["arguments"] == '{"args":["caf\ufffd"]}'
            assert "caf\ufffd" in text
    ok(run_cli(url, "job", "show", str(entries["not JSON"])))
    listed = json.loads(ok(run_cli(url, "failed", "list", "--json")))
    payloads = {e["id"]: e["payload"] for e in listed}
    assert set(payloads) == set(entries.values())
    for what, entry in entries.items():
        if what in ("not JSON", "100,000 deep", "not UTF-8"):
            assert isinstance(payloads[entry], str), what
    assert payloads[entries["lone surrogate escape"]]["args"] == ["caf\ufffd"]
    ok(run_cli(url, "failed", "list"))


def test_names_and_errors_that_are_no_utf8_print(migrated, backend):
    if backend != "sqlite":
        pytest.skip("only SQLite keeps bytes that are no UTF-8 in a TEXT column")
    url, app = migrated
    job_id = insert_job(app, name=_invalid_utf8("mail"), queue=_invalid_utf8("q"), last_error=_invalid_utf8("caf"))
    entry = insert_failed(app, name=_invalid_utf8("mail"), error_type=_invalid_utf8("Error"),
                          error_message=_invalid_utf8("caf"))
    text = ok(run_cli(url, "job", "show", str(job_id)))
    assert "mail\ufffd" in text and "caf\ufffd" in text
    assert json.loads(ok(run_cli(url, "job", "show", "--json", str(job_id))))["name"] == "mail\ufffd"
    assert "Error\ufffd: caf\ufffd" in ok(run_cli(url, "job", "show", str(entry)))
    assert "Error\ufffd: caf\ufffd" in ok(run_cli(url, "failed", "list"))
    [listed] = json.loads(ok(run_cli(url, "failed", "list", "--json")))
    assert (listed["name"], listed["error_type"], listed["error_message"]) == ("mail\ufffd", "Error\ufffd", "caf\ufffd")


# ---------------------------------------------------------------------------------- enqueue
def test_enqueue_refuses_deep_arguments_and_far_delays_as_usage_errors(migrated):
    url, app = migrated
    # 50,000 levels: far beyond any decoder's recursion, within the 128 KiB one argument may take.
    for option, value in (("--args", f"[{_nested(5000)}]"), ("--kwargs", '{"seconds": ' + _nested(50_000) + "}"),
                          ("--args", f"[{_nested(MAX_DEPTH + 1)}]")):
        done = run_cli(url, "enqueue", "sample_jobs.sleep_then_record", option, value)
        assert done.returncode == 2, (option, len(value), done.returncode, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and "nest" in done.stderr and option in done.stderr, done.stderr[-2000:]
    for delay in ("1e12", "inf", str(MAX_DELAY + 1)):
        done = run_cli(url, "enqueue", "sample_jobs.sleep_then_record", "--args", "[1]", "--delay", delay)
        assert done.returncode == 2 and "--delay" in done.stderr, (delay, done.returncode, done.stderr[-2000:])
    done = run_cli(url, "enqueue", "sample_jobs.sleep_then_record", "--args", "[1]", "--delay", "nan")
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr and "delay" in done.stderr
    assert app.store.jobs.list_jobs() == []
    deepest = ok(run_cli(url, "enqueue", "sample_jobs.take_any", "--args", f"[{_nested(MAX_DEPTH)}]",
                         "--delay", str(MAX_DELAY)))
    row = app.store.jobs.get_job(int(deepest.strip()))
    assert row is not None and row.arguments[0] == [json.loads(_nested(MAX_DEPTH))]
