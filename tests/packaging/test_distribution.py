"""What users install: `python -m build` makes an sdist and a wheel from a clean copy of the tree; the wheel
carries the dashboard's assets and every extra; the core runs a SQLite job with click as its only dependency."""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import scaled

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

EXTRAS = {"postgres", "mysql", "dashboard", "flask", "django", "metrics", "otel", "all"}


def _version() -> str:
    scope: dict[str, str] = {}
    exec((ROOT / "src" / "errands" / "__version__.py").read_text(), scope)
    return scope["__version__"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and wheel built the way a release is: from the files git tracks, in an isolated environment."""
    tree = tmp_path_factory.mktemp("tree")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree but not yet in git is skipped
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(tree)], capture_output=True,
                          text=True, timeout=scaled(600))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "deprecated" not in done.stdout.lower() + done.stderr.lower(), "the build warns about deprecated metadata"
    return out


def test_build_makes_an_sdist_and_a_wheel_with_the_version_from_one_place(dist):
    version = _version()
    assert sorted(p.name for p in dist.iterdir()) == [f"errands-{version}-py3-none-any.whl",
                                                      f"errands-{version}.tar.gz"]


def test_the_wheel_carries_assets_extras_and_a_console_script(dist):
    wheel = next(dist.glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.message_from_bytes(z.read(f"errands-{_version()}.dist-info/METADATA"))
        entry_points = z.read(f"errands-{_version()}.dist-info/entry_points.txt").decode()
    for asset in ("errands/dashboard/static/app.js", "errands/dashboard/static/app.css",
                  "errands/dashboard/templates/base.html", "errands/py.typed"):
        assert asset in names, asset
    assert not [n for n in names if n.startswith("tests/") or n.endswith(".pyc")]
    assert EXTRAS <= set(meta.get_all("Provides-Extra"))
    core = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert core == ["click>=8.1"], core  # the core with SQLite needs nothing but the CLI library
    assert meta["License-Expression"] == "MIT"
    assert "errands = errands.cli:main" in entry_points


def test_the_core_alone_runs_a_job_on_sqlite(dist, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=scaled(120))
    python = venv / "bin" / "python"
    wheel = next(dist.glob("*.whl"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    install = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel)],
                             capture_output=True, text=True, timeout=scaled(300), env=env)
    assert install.returncode == 0, install.stderr[-2000:]
    frozen = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True, env=env).stdout
    installed = {line.split("==")[0].lower() for line in frozen.split()} - {"pip", "setuptools", "wheel"}
    assert installed == {"click", "errands"}, installed
    script = f"""
from errands import Errands
app = Errands("sqlite:///{tmp_path / 'core.db'}")
seen = []
@app.job()
def add(a: int, b: int) -> None:
    seen.append(a + b)
add.enqueue(2, 3)
assert app.run_worker(burst=True) == 1 and seen == [5], seen
print("ok")
"""
    # A script file, as a user runs one: a job of ``python -c`` (an interactive __main__) is refused.
    (tmp_path / "core_check.py").write_text(script)
    ran = subprocess.run([str(python), "core_check.py"], capture_output=True, text=True, timeout=scaled(120), env=env,
                         cwd=tmp_path)
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr[-2000:]
    cli = subprocess.run([str(venv / "bin" / "errands"), "--version"], capture_output=True, text=True, env=env)
    assert cli.returncode == 0 and _version() in cli.stdout
    dashboard = subprocess.run([str(python), "-c", "import errands.dashboard"], capture_output=True, text=True,
                               env=env)
    assert dashboard.returncode != 0 and "pip install 'errands[dashboard]'" in dashboard.stderr
    # Every command that needs an extra says which, with exit 78 (configuration), never a traceback.
    sqlite = f"sqlite:///{tmp_path / 'core.db'}"
    for args, extra in ((["--database-url", sqlite, "dashboard"], "dashboard"),
                        (["--database-url", sqlite, "metrics"], "metrics"),
                        (["--database-url", "postgresql://nobody@127.0.0.1:1/x", "status"], "postgres"),
                        (["--database-url", "postgresql://nobody@127.0.0.1:1/x", "migrate"], "postgres"),
                        (["--database-url", "mysql://nobody@127.0.0.1:1/x", "status"], "mysql"),
                        (["--database-url", "mysql://nobody@127.0.0.1:1/x", "failed", "list"], "mysql")):
        done = subprocess.run([str(venv / "bin" / "errands"), *args], capture_output=True, text=True, env=env,
                              timeout=scaled(60), cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 78 and f"pip install 'errands[{extra}]'" in said and "Traceback" not in said, \
            (args, done.returncode, said[-1500:])
    doctor = subprocess.run([str(venv / "bin" / "errands"), "--database-url", "postgresql://nobody@127.0.0.1:1/x",
                             "doctor"], capture_output=True, text=True, env=env, timeout=scaled(60), cwd=tmp_path)
    assert "fix: pip install 'errands[postgres]'" in doctor.stdout and "Traceback" not in doctor.stderr, doctor.stdout
