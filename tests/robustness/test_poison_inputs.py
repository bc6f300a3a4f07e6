"""Poison input, on every backend: corrupt rows and hostile handlers mixed with good jobs.

Rows are written with raw SQL, as another program (or a disk) could: JSON that is no JSON, a
payload of the wrong shape or types, bytes that are no UTF-8 (SQLite keeps any), 100,000 levels of
nesting, 4 MB of garbage, a job no one registered; handlers raise text no driver can store, an
exception that cannot be printed, ``sys.exit()``, and return a value JSON cannot hold.  A
``--burst`` worker must exit 0 on its own, run every good job exactly once, leave every bad one in
the dead letter with its reason, and hold nothing.
"""

from __future__ import annotations

import random
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import poison_jobs
import pytest
from helpers import cli_env, scaled

from errands import Errands

GOOD = 40


@pytest.fixture
def poison_app(db_url: str) -> Iterator[Errands]:
    migrator = Errands(db_url)
    migrator.migrate()
    migrator.store.close()
    app = poison_jobs.app
    app.use_database(db_url)
    app.store.db.run(lambda cur: cur.execute(poison_jobs.RUNS_DDL))
    try:
        yield app
    finally:
        app.store.close()


def insert_raw(app: Errands, name: str, payload: Any, *, max_attempts: int = 3, extra: str = "",
               extra_value: Any = None) -> int:
    """A jobs row written by hand: ``payload`` as SQL text (a str) or an SQL expression (``extra``)."""
    store = app.store
    columns = "queue, name, payload, priority, attempts, max_attempts, available_at, created_at"
    values = "{p}, {p}, " + ("{p}" if extra != "payload" else str(extra_value)) + ", 0, 0, {p}, {now}, {now}"
    params: list[Any] = ["default", name] + ([payload] if extra != "payload" else []) + [max_attempts]
    if extra and extra != "payload":
        columns += f", {extra}"
        values += ", {p}"
        params.append(extra_value)

    def insert(cur: Any) -> int:
        cur.execute(store.dialect.q(f"INSERT INTO {{jobs}} ({columns}) VALUES ({values})"), params)
        cur.execute(store.dialect.q("SELECT MAX(id) FROM {jobs}"))
        return int(cur.fetchone()[0])

    return store.db.run(insert, write=True)


def test_poison_rows_and_handlers_cost_only_themselves(poison_app: Errands, backend: str, tmp_path: Path) -> None:
    app = poison_app
    good = [poison_jobs.good.enqueue(n, text="naïve ✓ \U0001F600") for n in range(GOOD // 2)]
    expected: dict[int, str] = {}  # bad job id -> the error type it must end with

    def bad(name: str, payload: Any, error: str, **kw: Any) -> None:
        expected[insert_raw(app, name, payload, **kw)] = error

    good_name = poison_jobs.good.name
    bad(good_name, '{"args": [1,', "errands.BadPayload")                        # not JSON
    bad(good_name, "[1, 2]", "errands.BadPayload")                              # not an object
    bad(good_name, '"just a string"', "errands.BadPayload")
    bad(good_name, "null", "errands.BadPayload")
    bad(good_name, '{"args": {"n": 1}, "kwargs": []}', "errands.BadPayload")    # wrong types
    bad(good_name, '{"args": [' + "[" * 100_000 + "]" * 100_000 + "]}", "errands.BadPayload")
    garbage = "".join(random.Random(7).choices(string.ascii_letters + string.punctuation + " ", k=4 * 1024 * 1024))
    bad(good_name, garbage, "errands.BadPayload")                               # 4 MB of garbage
    bad("nobody.registered.this", '{"args": [], "kwargs": {}}', "errands.UnknownJob")
    if backend == "sqlite":
        # SQLite keeps bytes that are no UTF-8 in a TEXT column; sqlite3 cannot read them as str.
        bad(good_name, None, "errands.BadPayload", extra="payload",
            extra_value="CAST(X'7B2261726773223A5B22636166E9225D7D' AS TEXT)")
        bad(good_name, '{"args": [1]}', "errands.BadPayload", extra="timeout", extra_value="soon")
    for job in (poison_jobs.surrogate_error, poison_jobs.unprintable_error, poison_jobs.exits):
        expected[job.enqueue().id] = {"surrogate_error": "ValueError", "unprintable_error": "poison_jobs.Unprintable",
                                      "exits": "SystemExit"}[job.name.rsplit(".", 1)[1]]
    deep = poison_jobs.deep_result.enqueue()
    good += [poison_jobs.good.enqueue(n) for n in range(GOOD // 2, GOOD)]

    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, "-m", "errands", "worker", "--burst", "-c", "4"],
                              env=cli_env(app.database_url, ERRANDS_APP="poison_jobs:app"), stdout=out,
                              stderr=subprocess.STDOUT, timeout=scaled(120))
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "died while running" not in text and "crashed" not in text, text[-3000:]

    store = app.store
    runs = store.db.run(lambda cur: (cur.execute("SELECT job_id FROM poison_runs"), cur.fetchall())[1])
    assert sorted(int(r[0]) for r in runs) == sorted(h.id for h in good)  # each good job once (primary key)
    assert store.jobs.list_jobs(limit=1000) == []  # nothing waits, nothing is held
    dead = {row.id: row for row in store.jobs.list_failed(limit=1000)}
    assert set(dead) == set(expected), (set(dead) ^ set(expected), text[-3000:])
    for job_id, error_type in expected.items():
        entry = dead[job_id]
        assert entry.error_type == error_type, (job_id, entry.error_type, entry.error_message)
        assert entry.error_message  # a reason, never empty
        assert len(entry.error_message) <= 2000
    surrogate = dead[next(i for i, e in expected.items() if e == "ValueError")]
    assert surrogate.error_message == "caf\ufffd \ufffd au lait"  # replacement characters, type kept
    assert surrogate.attempts == 2  # retried, then buried: never refunded in a loop
    result = store.features.get_result(deep.id)
    assert result is not None and result.result is None  # ran once; its unstorable value is kept as null
