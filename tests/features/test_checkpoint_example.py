"""The docs example of resumable long jobs (docs/features/checkpoints.md), run as written: the module
``backfill.py`` from the page walks a 1,000,000-row SQLite table in chunks of 10,000 with a checkpoint per
chunk, under real ``errands worker`` processes.  The first is stopped with SIGTERM mid-way (the job is
given back at its checkpoint, its attempt refunded), the second is killed with SIGKILL mid-way (its lease
lapses), and a third finishes from the last checkpoint: every chunk is done, none restarted from zero."""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import child_pids, cli_env, pid_alive, scaled, wait_for

from errands import JobState

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "docs" / "features" / "checkpoints.md"
ROWS = 1_000_000
CHUNK = 10_000


def module_from_page() -> str:
    """The page's ``# backfill.py`` block, as a reader would save it."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    [source] = [b for b in blocks if b.startswith("# backfill.py\n")]
    return source


def worker(folder: Path, n: int) -> tuple[subprocess.Popen[str], Path]:
    log = folder / f"worker-{n}.log"
    env = cli_env(f"sqlite:///{folder / 'errands.db'}", ERRANDS_APP="backfill:app")
    env["PYTHONPATH"] = f"{folder}:{env['PYTHONPATH']}"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "errands", "worker", "--lease", "2", "--no-listen",
                                 "--sleep", "0.2"], cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                                text=True)
    return proc, log


def row(app: Any, job_id: int) -> dict[str, Any]:
    def read(cur: Any) -> dict[str, Any]:
        cur.execute("SELECT attempts, resumptions, checkpoint, reserved_by FROM errands_jobs WHERE id = ?", (job_id,))
        found = cur.fetchone()
        return {} if found is None else {"attempts": found[0], "resumptions": found[1],
                                         "after": json.loads(found[2])["after"] if found[2] else 0, "owner": found[3]}

    return app.store.db.run(read)


def test_the_docs_backfill_survives_a_sigterm_and_a_sigkill_mid_way(tmp_path, monkeypatch):
    (tmp_path / "backfill.py").write_text(module_from_page())
    monkeypatch.chdir(tmp_path)  # the example's URLs are relative, as a reader's would be
    spec = importlib.util.spec_from_file_location("backfill_under_test", tmp_path / "backfill.py")
    assert spec is not None and spec.loader is not None
    backfill = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backfill)
    app = backfill.app
    procs: list[subprocess.Popen[str]] = []
    logs: list[Path] = []
    try:
        app.migrate()
        backfill.create_orders(ROWS)
        handle = backfill.backfill_cents.using(keep_result=True).enqueue()

        # 1. SIGTERM mid-way: given back at its checkpoint, the attempt refunded.
        proc, log = worker(tmp_path, 1)
        procs.append(proc), logs.append(log)
        wait_for(lambda: row(app, handle.id).get("after", ROWS) >= 10 * CHUNK, timeout=60, interval=0.005,
                 message="the first worker's first chunks")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(scaled(30)) == 0
        stopped = row(app, handle.id)
        assert stopped["attempts"] == 0 and stopped["resumptions"] == 1 and stopped["owner"] is None
        assert 10 * CHUNK <= stopped["after"] < ROWS

        # 2. SIGKILL mid-way: the worker and its process die at once; the lease lapses.
        proc, log = worker(tmp_path, 2)
        procs.append(proc), logs.append(log)
        target = stopped["after"] + min(20 * CHUNK, (ROWS - stopped["after"]) // 2)
        wait_for(lambda: row(app, handle.id).get("after", ROWS) >= target, timeout=60, interval=0.005,
                 message="the second worker's chunks")
        children = child_pids(proc.pid)
        proc.send_signal(signal.SIGKILL)  # the supervisor; PR_SET_PDEATHSIG takes its worker process along
        proc.wait(scaled(30))
        wait_for(lambda: not any(pid_alive(pid) for pid in children), message="the worker process to die")
        killed = row(app, handle.id)
        assert killed["attempts"] == 1 and killed["owner"] is not None and killed["after"] < ROWS

        # 3. Another worker recovers the lapsed run and finishes from the last checkpoint.
        proc, log = worker(tmp_path, 3)
        procs.append(proc), logs.append(log)
        wait_for(lambda: handle.status() is JobState.SUCCEEDED, timeout=90, message="the backfill to finish")
        assert handle.result(timeout=0) == ROWS
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(scaled(30))
        texts = [log.read_text(errors="replace") for log in logs]
        for log, text in zip(logs, texts, strict=True):
            print(f"--- {log.name}\n{text[-3000:]}")
        app.store.close()

    starts = [re.findall(r"backfill starts after id (\d+) \(attempt (\d+)\)", text) for text in texts]
    assert starts == [[("0", "1")], [(str(stopped["after"]), "1")], [(str(killed["after"]), "2")]]
    assert "stopped at its checkpoint and was given back" in texts[0]
    chunks = [[int(n) for n in re.findall(r"backfilled orders up to id (\d+)", text)] for text in texts]
    assert chunks[0][-1] == stopped["after"] and chunks[1][0] == stopped["after"] + CHUNK
    assert chunks[2][0] == killed["after"] + CHUNK and chunks[2][-1] == ROWS
    done = chunks[0] + chunks[1] + chunks[2]
    assert sorted(set(done)) == list(range(CHUNK, ROWS + 1, CHUNK))
    assert len(done) - len(set(done)) <= 1  # at most the chunk the kill interrupted ran twice
    with sqlite3.connect(tmp_path / "shop.db") as db:
        assert db.execute("SELECT count(*) FROM orders WHERE amount_cents IS NULL "
                          "OR amount_cents != CAST(round(amount * 100) AS INTEGER)").fetchone() == (0,)
