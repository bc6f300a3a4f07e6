"""`make demo` as a newcomer meets it: the worker and the dashboard start, jobs flow, Ctrl+C stops all."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import scaled, wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_serves_the_dashboard_runs_jobs_and_stops_on_ctrl_c(tmp_path):
    port = _free_port()
    env = dict(os.environ, DEMO_PORT=str(port))
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "demo" / "live_demo.py")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        banner = ""
        deadline = time.monotonic() + scaled(60)
        while "Press Ctrl+C" not in banner and time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line and proc.poll() is not None:
                break
            banner += line
        assert f"http://127.0.0.1:{port}/" in banner and "login: demo / demo-password" in banner, banner
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=scaled(10)) as response:
            assert response.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=scaled(10)) as response:
            assert b"Log in" in response.read()
        db = ROOT / "demo-output" / "demo.db"
        import sqlite3

        def finished() -> int:
            log = (ROOT / "demo-output" / "worker.log").read_text(errors="replace")
            return log.count(" done in ")

        wait_for(lambda: finished() >= 5, timeout=60, interval=0.2, message="the worker to run five jobs")
        conn = sqlite3.connect(db)
        assert conn.execute("SELECT COUNT(*) FROM errands_users").fetchone()[0] == 1
        conn.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=scaled(60)) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
