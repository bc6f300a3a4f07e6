"""`make demo` installs what the demo runs, not the development toolchain (issue 26): `make -n` prints the
commands make would run, against a scratch venv path, so nothing is installed here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry_run(target: str, venv: Path) -> str:
    # DJANGO6_PYTHON given: make need not probe every Python for the Django 6 venv (seconds per run).
    done = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(ROOT), target, f"VENV={venv}",
                           "DJANGO6_PYTHON=python3"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _pip_installs(commands: str) -> list[str]:
    return [line for line in commands.splitlines() if "pip install" in line]


def test_make_demo_on_a_fresh_clone_installs_the_dashboard_extra_only(tmp_path: Path) -> None:
    commands = _dry_run("demo", tmp_path / "venv")
    installs = _pip_installs(commands)
    assert len(installs) == 1 and "-e '.[dashboard]'" in installs[0], commands
    assert "[dev]" not in commands
    assert commands.rstrip().endswith("examples/demo/live_demo.py")


def test_the_dev_install_covers_the_demo_so_make_demo_after_make_test_installs_nothing(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    commands = _dry_run("venv", venv)
    assert any("-e '.[dev]'" in line for line in _pip_installs(commands)), commands
    assert f"touch {venv}/.installed-demo {venv}/.installed" in commands
    venv.mkdir()
    (venv / ".installed").touch()
    (venv / ".installed-demo").touch()
    assert _pip_installs(_dry_run("demo", venv)) == []


def test_make_test_after_make_demo_adds_the_development_tools(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-demo").touch()
    assert _pip_installs(_dry_run("demo", venv)) == []
    assert any("-e '.[dev]'" in line for line in _pip_installs(_dry_run("venv", venv)))
