"""Starting real worker processes through the CLI and waiting for conditions."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
APPS = Path(__file__).parent / "apps"
SRC = Path(__file__).parent.parent / "src"


def cli_env(db_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"ERRANDS_DATABASE_URL": db_url, "ERRANDS_APP": "sample_jobs:app",
                "PYTHONPATH": os.pathsep.join([str(APPS), str(SRC), env.get("PYTHONPATH", "")])})
    env.update(extra)
    return env


def run_cli(db_url: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "errands", *args], env=cli_env(db_url, **extra),
                          capture_output=True, text=True, timeout=120)


def start_worker(db_url: str, *args: str, log_path: Path | None = None, **extra: str) -> subprocess.Popen[str]:
    out = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "-m", "errands", "worker", *args], env=cli_env(db_url, **extra),
                            stdout=out, stderr=subprocess.STDOUT, text=True)


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
             message: str = "condition") -> T:
    """Poll until ``predicate()`` is truthy; fail the test with ``message`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
