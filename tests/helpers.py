"""Starting real worker processes through the CLI and waiting for conditions."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
APPS = Path(__file__).parent / "apps"
SRC = Path(__file__).parent.parent / "src"


def _time_scale() -> float:
    raw = os.environ.get("ERRANDS_TEST_TIME_SCALE", "").strip() or "1"
    try:
        scale = float(raw)
    except ValueError:
        scale = 0.0
    if not scale > 0:
        raise ValueError(f"ERRANDS_TEST_TIME_SCALE must be a number above 0, not {raw!r}")
    return scale


# The one setting behind every time limit of the suite (README.md, "Quick start"): a busy or slow
# machine raises them all at once, e.g. ERRANDS_TEST_TIME_SCALE=3.  Never applied to how long a test
# lets time pass on purpose, nor to "this took at least" checks.
TIME_SCALE = _time_scale()


def scaled(seconds: float) -> float:
    """A time limit of ``seconds`` on a normal machine, times ERRANDS_TEST_TIME_SCALE."""
    return seconds * TIME_SCALE


def cli_env(db_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"ERRANDS_DATABASE_URL": db_url, "ERRANDS_APP": "sample_jobs:app",
                "PYTHONPATH": os.pathsep.join([str(APPS), str(SRC), env.get("PYTHONPATH", "")])})
    env.update(extra)
    return env


def run_cli(db_url: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "errands", *args], env=cli_env(db_url, **extra),
                          capture_output=True, text=True, timeout=scaled(120))


def invoke_cli(db_url: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """``run_cli`` in this process (click's runner, the same environment): for the many calls that end
    at option parsing, where a new interpreter per call (about a second) only measured Python's start."""
    from click.testing import CliRunner

    from errands.cli import main

    done = CliRunner().invoke(main, list(args), env=cli_env(db_url, **extra), prog_name="errands")
    return subprocess.CompletedProcess(["errands", *args], done.exit_code, done.stdout, done.stderr)


def start_worker(db_url: str, *args: str, log_path: Path | None = None, **extra: str) -> subprocess.Popen[str]:
    if log_path is None:
        return subprocess.Popen([sys.executable, "-m", "errands", "worker", *args], env=cli_env(db_url, **extra),
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, text=True)
    # The child gets its own copy of the descriptor; ours is closed at once (no ResourceWarning later).
    with open(log_path, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "errands", "worker", *args], env=cli_env(db_url, **extra),
                                stdout=out, stderr=subprocess.STDOUT, text=True)


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
             message: str = "condition") -> T:
    """Poll until ``predicate()`` is truthy; fail the test with ``message`` after ``timeout`` seconds
    (scaled by ERRANDS_TEST_TIME_SCALE: callers pass the limit for a normal machine)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def wait_for_db_clock(store, moment, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    """Wait until the database's clock (``store.now()``) has passed ``moment`` (an aware datetime read
    from that clock, e.g. a lease's end); returns the clock's reading.  What a test waits for when a
    verb judges time by the database (a lapsed lease, a due job, an expiry), instead of sleeping."""
    def passed():  # type: ignore[no-untyped-def]
        now = store.now()
        return now if now > moment else None

    return wait_for(passed, timeout=timeout, interval=0.005, message=f"the database clock to pass {moment}")


def free_port() -> int:
    """A local TCP port nothing listens on now, for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------- process trees (Linux /proc)
def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], parent pid is [1])."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie has already died)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def pid_state(pid: int) -> str | None:
    """One-letter scheduler state (R, S, T for stopped, Z...) or None when gone."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[0]


def child_pids(pid: int) -> list[int]:
    """Live children of ``pid`` (what ``pgrep -P`` prints), found by scanning /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and fields[1] == str(pid) and fields[0] not in ("Z", "X"):
                found.append(int(entry))
    return sorted(found)


def drain(app, queues=("default",), concurrency: int = 1, max_jobs: int | None = None) -> int:  # type: ignore[no-untyped-def]
    """Run ready jobs in this process until none is left (an in-process burst worker)."""
    from errands.worker.runner import Worker, WorkerSettings

    worker = Worker(app, WorkerSettings(queues=tuple(queues), concurrency=concurrency, burst=True,
                                        max_jobs=max_jobs, sleep=0.05))
    worker.run()
    return worker.jobs_done


BACKENDS = ["sqlite", "postgres", "mariadb", "mariadb-update"]
"""The backends every ``backend``-parametrised test runs on (tests/conftest.py)."""
DIALECT_OF = {"sqlite": "sqlite", "postgres": "postgresql", "mariadb": "mysql", "mariadb-update": "mysql"}
"""The dialect (``errands.store.registry``) each test backend runs; tests/architecture checks that every
registered backend has one, so a new backend joins the shared suites."""
