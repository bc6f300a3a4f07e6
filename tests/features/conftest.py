"""Fixtures of the many-process feature tests: the feature app on the test's database, and
worker supervisors started through the CLI (stopped, and their logs printed, at the end)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import feature_jobs
import pytest
from helpers import scaled, start_worker

from errands import Errands


@pytest.fixture
def fapp(migrated_url: str) -> Iterator[Errands]:
    db_url = migrated_url
    app = feature_jobs.app
    app.use_database(db_url)
    feature_jobs.ensure_events_table()
    try:
        yield app
    finally:
        app.store.close()


@pytest.fixture
def spawn(db_url: str, tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []
    logs: list[Path] = []

    def start(*args: str, app: str = "feature_jobs:app", lease: str = "5") -> subprocess.Popen[str]:
        log = tmp_path / f"worker-{len(procs)}.log"
        proc = start_worker(db_url, *args, log_path=log, ERRANDS_APP=app, ERRANDS_TEST_LEASE=lease)
        procs.append(proc)
        logs.append(log)
        return proc

    start.logs = logs  # type: ignore[attr-defined]
    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=scaled(20))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for log in logs:
        print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")
