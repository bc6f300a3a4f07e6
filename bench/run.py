"""The benchmark of issue 3: errands against its peers and bare-SQL loops, in one run, one table.

    .venv/bin/python bench/run.py            # full: 20,000 jobs per run, median of 3
    .venv/bin/python bench/run.py --quick    # QUICK=1: fewer jobs, one repetition, under 3 minutes

``make bench`` / ``make bench QUICK=1`` call this.  It

1. makes sure the peers' own virtual environment (bench/.venv-peers) holds
   bench/peers-requirements.txt (never the project's dependencies);
2. for every figure and every system, creates a fresh database
   (``errands_bench_*`` on PostgreSQL and MariaDB, a temporary SQLite file, an
   emptied Redis database for the Redis brokers), runs that system's script
   in a subprocess (errands and the bare loops with the project venv, peers
   with the peers' venv), and drops the database again;
3. takes the median over repetitions, prints one table and errands' ratios,
   and writes bench/results/<timestamp>.json/.md plus latest.json/latest.md.

Nothing here asserts a timing.  See docs/performance.md for the method.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import chart  # noqa: E402
import common  # noqa: E402

PROJECT_PY = sys.executable
PEERS_VENV = os.environ.get("BENCH_PEERS_VENV", os.path.join(HERE, ".venv-peers"))
PEERS_PY = os.path.join(PEERS_VENV, "bin", "python")
REQUIREMENTS = os.environ.get("BENCH_PEERS_REQUIREMENTS", os.path.join(HERE, "peers-requirements.txt"))
RESULTS = os.path.join(HERE, "results")
DOCS_CHART = os.path.join(ROOT, "docs", "img", "bench-latest.svg")

PG_ADMIN = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
MY_ADMIN = os.environ.get("BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
REDIS_MARK = "errands_bench:owner"


# ---------------------------------------------------------------------------- what is measured

SYNC_MODES = ("enqueue", "drain1", "latency")
"""What the synchronous=full row measures: one commit per enqueue call; a drain of a backlog (claims and
settles of many jobs each); and the pickup of jobs that arrive one at a time (a claim of one job)."""
SYNC_FIGURES = ("enqueue", "drain1", "latency_p50")

@dataclass(frozen=True)
class System:
    key: str
    label: str
    short: str  # used in ratio lines
    kind: str  # pg | mysql | sqlite | redis
    script: str
    peer: bool = False
    packages: tuple[str, ...] = ()
    modes: tuple[str, ...] = ("enqueue", "bulk", "drain1", "drain2", "latency")
    url_query: str = ""  # appended to the fresh database's URL (errands' own options)


SYSTEMS = [
    System("errands-pg", "errands (PostgreSQL)", "errands PG", "pg", "errands_bench.py",
           modes=("enqueue", "bulk", "drain1", "drain2", "latency", "io", "scale_small", "scale_big")),
    System("errands-mariadb", "errands (MariaDB)", "errands MariaDB", "mysql", "errands_bench.py",
           modes=("enqueue", "bulk", "drain1", "drain2", "latency", "io", "scale_small", "scale_big")),
    System("errands-sqlite", "errands (SQLite)", "errands SQLite", "sqlite", "errands_bench.py",
           modes=("enqueue", "bulk", "drain1", "drain2", "latency", "io", "scale_small", "scale_big")),
    # Issue 11: the cost of an fsync per commit, measured right after the default (synchronous=normal).
    System("errands-sqlite-full", "errands (SQLite, synchronous=full)", "errands SQLite full", "sqlite",
           "errands_bench.py", modes=SYNC_MODES, url_query="?synchronous=full"),
    System("pgqueuer", "PgQueuer (PostgreSQL)", "PgQueuer", "pg", "peers/pgqueuer_bench.py", True,
           ("pgqueuer", "asyncpg")),
    System("procrastinate", "procrastinate (PostgreSQL)", "procrastinate", "pg", "peers/procrastinate_bench.py", True,
           ("procrastinate", "psycopg")),
    System("huey", "Huey (SQLite)", "Huey", "sqlite", "peers/huey_bench.py", True, ("huey",),
           modes=("enqueue", "drain1", "drain2", "latency")),
    System("dramatiq", "dramatiq (Redis)", "dramatiq", "redis", "peers/dramatiq_bench.py", True,
           ("dramatiq", "redis"), modes=("enqueue", "drain1", "drain2", "latency")),
    System("celery", "Celery prefork (Redis)", "Celery", "redis", "peers/celery_bench.py", True,
           ("celery", "redis"), modes=("enqueue", "drain1", "drain2", "latency")),
    System("bare-pg", "bare SQL loop (PostgreSQL)", "bare", "pg", "bare_bench.py",
           modes=("enqueue", "bulk", "drain1", "drain2")),
    System("bare-mariadb", "bare SQL loop (MariaDB)", "bare", "mysql", "bare_bench.py",
           modes=("enqueue", "bulk", "drain1", "drain2")),
    System("bare-sqlite", "bare SQL loop (SQLite)", "bare", "sqlite", "bare_bench.py",
           modes=("enqueue", "bulk", "drain1", "drain2")),
    # Issue 29: the honest limit of a leased queue (lease UPDATE, no-op, DELETE on settle; errands' durability).
    System("bare-leased-pg", "bare leased loop (PostgreSQL)", "bare leased", "pg", "bare_leased_bench.py",
           modes=("drain1", "drain2")),
    System("bare-leased-mariadb", "bare leased loop (MariaDB)", "bare leased", "mysql", "bare_leased_bench.py",
           modes=("drain1", "drain2")),
    System("bare-leased-sqlite", "bare leased loop (SQLite)", "bare leased", "sqlite", "bare_leased_bench.py",
           modes=("drain1", "drain2")),
]
BY_KEY = {s.key: s for s in SYSTEMS}
SYNC_PAIR = ("errands-sqlite-full", "errands-sqlite")
"""synchronous=full against errands' default (normal) on SQLite: same figures, same run, ratio printed."""
BARE_FOR = {"errands-pg": "bare-pg", "errands-mariadb": "bare-mariadb", "errands-sqlite": "bare-sqlite"}
LEASED_FOR = {"errands-pg": "bare-leased-pg", "errands-mariadb": "bare-leased-mariadb",
              "errands-sqlite": "bare-leased-sqlite"}
"""errands against the bare leased loop (issue 29 goal 3: >= 0.9x on PostgreSQL and MariaDB, >= 0.35x SQLite)."""
LEASED_FIGURES = ("drain1", "drain2", "cpu1", "cpu2")
PEERS = [s for s in SYSTEMS if s.peer]

# figure key -> (column title, unit, higher is better)
FIGURES = {
    "enqueue": ("enqueue 1-by-1", "jobs/s", True),
    "bulk": ("bulk enqueue", "jobs/s", True),
    "drain1": ("drain 1p", "jobs/s", True),
    "drain2": ("drain 2p", "jobs/s", True),
    "cpu1": ("CPU/job 1p", "µs", False),
    "cpu2": ("CPU/job 2p", "µs", False),
    "cpu_enqueue": ("CPU/job enqueue", "µs", False),
    "cpu_bulk": ("CPU/job bulk", "µs", False),
    "latency_p50": ("pickup p50", "ms", False),
    "latency_p99": ("pickup p99", "ms", False),
    "io": ("I/O 10 ms x32", "jobs/s", True),
}
CPU_FIGURES = ("cpu1", "cpu2", "cpu_enqueue", "cpu_bulk")
"""The figures read from a run's ``cpu_us_per_job``: the workers' CPU per job in a drain, the
enqueuing process's in an enqueue (issue 29, goal 1)."""
IO_IDEAL = 3200
"""32 threads each finishing a 10 ms job: the most an I/O-bound run can reach."""


@dataclass
class Params:
    quick: bool
    reps: int
    jobs: int
    enqueue_jobs: int
    samples: int
    interval: float
    scale_small: int
    scale_big: int
    scale_measured_small: int
    scale_measured_big: int
    timeout: float
    io_jobs: int = 6400

    @classmethod
    def make(cls, quick: bool, jobs: int | None, reps: int | None, scale: bool) -> Params:
        if quick:
            n = jobs or 1000
            return cls(True, reps or 1, n, n, 50, 0.02, 10_000 if scale else 0, 100_000 if scale else 0,
                       2_000, 2_000, 120.0, io_jobs=1600)
        n = jobs or 20_000
        return cls(False, reps or 3, n, n, 200, 0.02, 10_000 if scale else 0, 1_000_000 if scale else 0,
                   10_000, 1_000_000, max(600.0, n / 20))


# ---------------------------------------------------------------------------- fresh databases


def _pg_admin() -> Any:
    import psycopg

    return psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=10)


def _my_admin() -> Any:
    import pymysql
    from urllib.parse import unquote, urlsplit

    p = urlsplit(MY_ADMIN)
    return pymysql.connect(host=p.hostname or "127.0.0.1", port=p.port or 3306, user=unquote(p.username or "root"),
                           password=unquote(p.password or ""), autocommit=True, connect_timeout=10)


def _swap_db(url: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path="/" + name, query=""))


class FreshDatabase:
    """A database made for one run and removed after it."""

    def __init__(self, kind: str, tag: str) -> None:
        self.kind = kind
        self.name = f"errands_bench_{tag.replace('-', '_')}_{secrets.token_hex(3)}"
        self.tmp: str | None = None
        self.url = ""

    def __enter__(self) -> FreshDatabase:
        if self.kind == "pg":
            with _pg_admin() as conn:
                conn.execute(f'CREATE DATABASE "{self.name}"')
            self.url = _swap_db(PG_ADMIN, self.name)
        elif self.kind == "mysql":
            conn = _my_admin()
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4")
            conn.close()
            self.url = _swap_db(MY_ADMIN, self.name)
        elif self.kind == "sqlite":
            self.tmp = tempfile.mkdtemp(prefix="errands_bench_")
            self.url = f"sqlite:///{os.path.join(self.tmp, self.name + '.db')}"
        elif self.kind == "redis":
            size = common.redis_command(REDIS_URL, "DBSIZE")
            if size and not common.redis_command(REDIS_URL, "EXISTS", REDIS_MARK):
                raise RuntimeError(f"Redis database {REDIS_URL} holds {size} keys that are not the benchmark's; "
                                   "point BENCH_REDIS_URL at an empty database")
            common.redis_command(REDIS_URL, "FLUSHDB")
            common.redis_command(REDIS_URL, "SET", REDIS_MARK, "1")
            self.url = REDIS_URL
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.kind == "pg":
                with _pg_admin() as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            elif self.kind == "mysql":
                conn = _my_admin()
                with conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{self.name}`")
                conn.close()
            elif self.kind == "sqlite" and self.tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)
            elif self.kind == "redis":
                common.redis_command(REDIS_URL, "FLUSHDB")
        except Exception as e:  # cleanup problems are reported, never fatal
            print(f"  warning: could not remove {self.kind} database {self.name}: {e}", file=sys.stderr)


def drop_leftovers() -> None:
    """Remove errands_bench_* databases an interrupted run left behind."""
    try:
        with _pg_admin() as conn:
            names = [r[0] for r in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'errands\\_bench\\_%'")]
            for n in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)')
    except Exception as e:
        print(f"  warning: PostgreSQL leftovers not checked: {e}", file=sys.stderr)
    try:
        conn = _my_admin()
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE 'errands\\_bench\\_%'")
            for (n,) in cur.fetchall():
                cur.execute(f"DROP DATABASE IF EXISTS `{n}`")
        conn.close()
    except Exception as e:
        print(f"  warning: MariaDB leftovers not checked: {e}", file=sys.stderr)


# ---------------------------------------------------------------------------- the peers' venv


def ensure_peers_venv(install: bool) -> dict[str, str]:
    """Create/update bench/.venv-peers; returns {package: failure reason} for what could not be installed."""
    stamp = os.path.join(PEERS_VENV, ".installed")
    with open(REQUIREMENTS, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    status_path = os.path.join(PEERS_VENV, "install-status.json")
    if os.path.exists(stamp) and open(stamp).read().strip() == digest:
        try:
            return json.load(open(status_path))
        except (OSError, ValueError):
            return {}
    if not install:
        return {"*": "peers' venv missing or stale (run without --no-install)"}
    print(f"installing the peers into {os.path.relpath(PEERS_VENV, ROOT)} ...", file=sys.stderr)
    failures: dict[str, str] = {}
    if not os.path.exists(PEERS_PY):
        base = os.environ.get("BENCH_PEERS_PYTHON", "python3")
        r = subprocess.run([base, "-m", "venv", PEERS_VENV], capture_output=True, text=True)
        if r.returncode:
            failures["*"] = f"cannot create the venv: {(r.stderr or r.stdout).strip()[-200:]}"
            return failures
    pip = [PEERS_PY, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    r = subprocess.run(pip + ["-r", REQUIREMENTS], capture_output=True, text=True)
    if r.returncode:
        # One broken pin must not take the others down: install line by line and remember what failed.
        for line in open(REQUIREMENTS):
            req = line.split("#")[0].strip()
            if not req:
                continue
            r = subprocess.run(pip + [req], capture_output=True, text=True)
            if r.returncode:
                name = req.split("[")[0].split("=")[0].split("<")[0].split(">")[0].strip().lower()
                err = [x for x in (r.stderr or r.stdout).strip().splitlines() if x.startswith("ERROR")]
                failures[name] = f"pip install {req} failed: {(err[-1] if err else 'see pip output')[:160]}"
    with open(status_path, "w") as f:
        json.dump(failures, f)
    with open(stamp, "w") as f:
        f.write(digest)
    return failures


# ---------------------------------------------------------------------------- running one measurement


def run_script(system: System, mode: str, url: str, workdir: str, p: Params, timeout: float) -> dict[str, Any]:
    """Run one system's script for one mode; always returns a dict (``error`` on failure)."""
    python = PEERS_PY if system.peer else PROJECT_PY
    args = {"enqueue": ["--mode", "enqueue", "--jobs", str(p.enqueue_jobs)],
            "bulk": ["--mode", "bulk", "--jobs", str(p.jobs)],
            "drain1": ["--mode", "drain", "--jobs", str(p.jobs), "--processes", "1"],
            "drain2": ["--mode", "drain", "--jobs", str(p.jobs), "--processes", "2"],
            "latency": ["--mode", "latency", "--samples", str(p.samples), "--interval", str(p.interval),
                        "--processes", "1"],
            "scale_small": ["--mode", "scale", "--waiting", str(p.scale_small), "--jobs",
                            str(p.scale_measured_small), "--processes", "1"],
            "scale_big": ["--mode", "scale", "--waiting", str(p.scale_big), "--jobs", str(p.scale_measured_big),
                          "--processes", "1"],
            "io": ["--mode", "io", "--jobs", str(p.io_jobs), "--processes", "1"],
            "info": ["--mode", "info"]}[mode]
    cmd = [python, os.path.join(HERE, system.script), *args, "--db-url", url, "--workdir", workdir,
           "--timeout", str(timeout)]
    err_path = os.path.join(workdir, "stderr.txt")
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, start_new_session=True, cwd=workdir)
        try:
            out, _ = proc.communicate(timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"no answer within {timeout + 60:.0f}s"}
    lines = [x for x in out.decode("utf-8", "replace").splitlines() if x.startswith("{")]
    if not lines:
        why = common.tail(err_path, 3).replace("\n", " | ")[-200:]
        return {"error": f"exit {proc.returncode}, no result; {why}"}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": f"unreadable result line: {lines[-1][:120]}"}


def measure(system: System, mode: str, p: Params) -> dict[str, Any]:
    timeout = p.timeout if not mode.startswith("scale") else max(p.timeout, 900.0)
    workdir = tempfile.mkdtemp(prefix=f"errands_bench_{system.key}_")
    try:
        with FreshDatabase(system.kind, system.key.split("-")[0][:10]) as db:
            return run_script(system, mode, db.url + system.url_query, workdir, p, timeout)
    except Exception as e:
        return {"error": f"set-up failed: {type(e).__name__}: {e}"[:300]}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------------------- environment facts


def server_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {}
    try:
        with _pg_admin() as conn:
            facts["postgresql"] = {"version": conn.execute("SHOW server_version").fetchone()[0]}
            for name in ("fsync", "synchronous_commit", "shared_buffers", "max_connections"):
                facts["postgresql"][name] = conn.execute(f"SHOW {name}").fetchone()[0]
    except Exception as e:
        facts["postgresql"] = {"error": str(e)[:200]}
    try:
        conn = _my_admin()
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@innodb_buffer_pool_size, @@log_bin, "
                        "@@sync_binlog, @@max_connections")
            v = cur.fetchone()
        conn.close()
        facts["mariadb"] = {"version": v[0], "innodb_flush_log_at_trx_commit": v[1], "innodb_buffer_pool_size": v[2],
                            "log_bin": v[3], "sync_binlog": v[4], "max_connections": v[5]}
    except Exception as e:
        facts["mariadb"] = {"error": str(e)[:200]}
    try:
        info = common.redis_command(REDIS_URL, "INFO", "server")
        info += common.redis_command(REDIS_URL, "INFO", "persistence")
        kv = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        facts["redis"] = {"version": kv.get("redis_version", "?"), "aof_enabled": kv.get("aof_enabled", "?"),
                          "database": REDIS_URL}
    except Exception as e:
        facts["redis"] = {"error": str(e)[:200]}
    facts["sqlite"] = {"library (project venv)": sqlite3.sqlite_version,
                       "filesystem of its temporary files": temp_filesystem()}
    return facts


def temp_filesystem() -> str:
    """The filesystem the SQLite files live on (tempfile's directory): on tmpfs an fsync costs nothing,
    and synchronous=full would look free."""
    path = os.path.realpath(tempfile.gettempdir())
    best, kind = "", "?"
    try:
        for line in open("/proc/mounts"):
            _, mount, fstype, *_ = line.split()
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                best, kind = mount, fstype
    except OSError:
        return "?"
    return f"{kind} ({path} on {best})" + (": fsync is free here, synchronous=full figures mean nothing"
                                          if kind in ("tmpfs", "ramfs") else "")


def pip_freeze(python: str) -> dict[str, str]:
    """Every installed distribution of one interpreter, name -> version."""
    code = ("import json, importlib.metadata as m; "
            "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
        return dict(sorted(json.loads(r.stdout).items(), key=lambda kv: kv[0].lower()))
    except Exception as e:  # informative only
        return {"error": str(e)[:200]}


def errands_revision() -> dict[str, Any]:
    """Which errands code ran: the commit, and whether src/ had uncommitted changes."""
    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=30)
        return r.stdout.strip()

    try:
        changed = [line.split(maxsplit=1)[-1] for line in git("status", "--porcelain", "--", "src").splitlines()]
        return {"commit": git("rev-parse", "--short", "HEAD"), "uncommitted changes in src/": changed or "none"}
    except Exception as e:  # not a git checkout
        return {"error": str(e)[:200]}


def machine_facts() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(), "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


# ---------------------------------------------------------------------------- aggregation and output


def value_of(result: dict[str, Any], figure: str) -> float | None:
    if "error" in result or "na" in result:
        return None
    if figure == "latency_p50":
        return result.get("p50_ms")
    if figure == "latency_p99":
        return result.get("p99_ms")
    if figure in CPU_FIGURES:
        return result.get("cpu_us_per_job")
    return result.get("value")


FIGURE_MODE = {"enqueue": "enqueue", "bulk": "bulk", "drain1": "drain1", "drain2": "drain2",
               "cpu1": "drain1", "cpu2": "drain2", "cpu_enqueue": "enqueue", "cpu_bulk": "bulk",
               "latency_p50": "latency", "latency_p99": "latency", "io": "io"}


def aggregate(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per system and figure: median over runs, or the reason there is none."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for s in SYSTEMS:
        out[s.key] = {}
        figures = list(FIGURES) + ["scale_small", "scale_big"]
        for fig in figures:
            mode = FIGURE_MODE.get(fig, fig)
            runs = raw.get(s.key, {}).get(mode)
            if mode not in s.modes:
                out[s.key][fig] = {"status": "n/a"}
                continue
            if not runs:
                out[s.key][fig] = {"status": "not run"}
                continue
            values = [v for v in (value_of(r, fig) for r in runs) if v is not None]
            errors = [r["error"] for r in runs if "error" in r]
            nas = [r["na"] for r in runs if "na" in r]
            if values:
                cell: dict[str, Any] = {"status": "ok", "median": common.median(values), "runs": values}
                if errors:
                    cell["failed_runs"] = errors
                if fig.startswith("scale"):
                    growth = [r.get("worker_rss_growth_kib") for r in runs if "worker_rss_growth_kib" in r]
                    peak = [r.get("worker_rss_max_kib") for r in runs if "worker_rss_max_kib" in r]
                    cell["waiting"] = runs[0].get("waiting")
                    cell["measured_jobs"] = runs[0].get("jobs")
                    if growth:
                        cell["worker_rss_growth_kib"] = common.median(growth)
                        cell["worker_rss_max_kib"] = common.median(peak)
                out[s.key][fig] = cell
            elif nas:
                out[s.key][fig] = {"status": "n/a", "reason": nas[0]}
            elif not errors and fig in CPU_FIGURES:
                out[s.key][fig] = {"status": "not measured"}  # the run ran, its CPU was not measured
            else:
                out[s.key][fig] = {"status": "failed", "reason": errors[0] if errors else "no result"}
    return out


def short_reason(reason: str, width: int = 30) -> str:
    """A table-sized reason: the exception's class when there is one; the full text goes below the table."""
    import re

    text = reason.replace("set-up failed: ", "").replace("|", "/")
    if text.startswith("pip install"):
        return "not installed (pip failed)"
    m = re.match(r"\s*([A-Za-z_.]*(?:Error|Exception|Timeout|Interrupt))\b", text)
    if m:
        text = m.group(1)
    return text if len(text) <= width else text[: width - 1] + "…"


def failure_lines(agg: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """One line per system and distinct reason, naming the figures it cost."""
    out = []
    for key, figs in agg.items():
        by_reason: dict[str, list[str]] = {}
        for f, c in figs.items():
            if c["status"] == "failed":
                by_reason.setdefault(c["reason"], []).append(FIGURES.get(f, (f,))[0])
            for r in c.get("failed_runs", []):
                by_reason.setdefault(r, []).append(FIGURES.get(f, (f,))[0] + " (one run)")
        for reason, names in by_reason.items():
            out.append(f"{BY_KEY[key].label} [{', '.join(names)}]: {reason}")
    return out


def fmt(cell: dict[str, Any], unit: str, width: int = 30) -> str:
    if cell["status"] == "ok":
        v = cell["median"]
        text = f"{v:,.1f}" if unit in ("ms", "µs") else f"{v:,.0f}"
        if cell.get("failed_runs"):
            text += f" ({len(cell['failed_runs'])} run(s) failed)"
        return text
    if cell["status"] == "failed":
        return "failed: " + short_reason(cell["reason"], width)
    return "n/a" if cell["status"] == "n/a" else "—"


def table(agg: dict[str, dict[str, dict[str, Any]]], p: Params) -> str:
    big = f"{p.scale_big // 1000:,}k" if p.scale_big < 1_000_000 else f"{p.scale_big // 1_000_000}M"
    heads = ["system"] + [f"{t} ({u})" for t, u, _ in FIGURES.values()]
    scale = p.scale_big > 0
    if scale:
        heads += [f"@{p.scale_small // 1000}k waiting (jobs/s)", f"@{big} waiting (jobs/s)",
                  f"RSS growth @{p.scale_small // 1000}k/@{big} (KiB)"]
    rows = []
    for s in SYSTEMS:
        row = [s.label] + [fmt(agg[s.key][f], u) for f, (_, u, _) in FIGURES.items()]
        if scale:
            if s.key.startswith("errands"):
                small, bigc = agg[s.key]["scale_small"], agg[s.key]["scale_big"]
                growth = " / ".join(f"{c['worker_rss_growth_kib']:+,.0f}" if c.get("worker_rss_growth_kib") is not None
                                    else "—" for c in (small, bigc))
                row += [fmt(small, "jobs/s"), fmt(bigc, "jobs/s"), growth]
            else:
                row += ["—", "—", "—"]
        rows.append(row)
    widths = [max(len(r[i]) for r in [heads] + rows) for i in range(len(heads))]

    def line(cells: list[str]) -> str:
        padded = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        return "| " + " | ".join(padded) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    return "\n".join([line(heads), sep] + [line(r) for r in rows])


def ratios(agg: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """errands' ratio to the bare loop on the same DB and to each peer, per figure."""
    lines = []
    for ekey, bkey in BARE_FOR.items():
        e = BY_KEY[ekey]
        for fig, (title, unit, higher) in FIGURES.items():
            mine = agg[ekey][fig]
            if mine["status"] != "ok":
                lines.append(f"{e.short} {title} = {fmt(mine, unit)}")
                continue
            if fig == "io":
                lines.append(f"{e.short} {title} = {mine['median'] / IO_IDEAL:.0%} of the ideal {IO_IDEAL:,} jobs/s")
                continue
            parts = []
            for other in [BY_KEY[bkey]] + PEERS:
                theirs = agg[other.key][fig]
                if theirs["status"] == "ok" and theirs["median"]:
                    parts.append(f"{mine['median'] / theirs['median']:.2f}x {other.short}")
                elif theirs["status"] == "failed":
                    parts.append(f"— {other.short} (failed)")
            note = "" if higher else (" (cost ratio: below 1x = errands spent less CPU per job)" if unit == "µs"
                                      else " (latency ratio: below 1x = errands faster)")
            lines.append(f"{e.short} {title} = " + (", ".join(parts) or "nothing to compare") + note)
    return lines


def sync_ratios(agg: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """errands on SQLite with synchronous=full against the default (normal), per figure of SYNC_MODES."""
    full, normal = SYNC_PAIR
    lines = []
    for fig in SYNC_FIGURES:
        title, unit, higher = FIGURES[fig]
        a, b = agg[full][fig], agg[normal][fig]
        if a["status"] == "ok" and b["status"] == "ok" and b["median"]:
            note = "" if higher else " (latency: above 1x = slower with full)"
            lines.append(f"errands SQLite {title}: synchronous=full {fmt(a, unit)} {unit} / normal {fmt(b, unit)} "
                         f"{unit} = {a['median'] / b['median']:.2f}x{note}")
        else:
            lines.append(f"errands SQLite {title}: synchronous=full {fmt(a, unit)}, normal {fmt(b, unit)}")
    return lines


BARE_FIGURES = [f for f in FIGURES if f != "io"]
"""errands' figures that the bare-ratio table lists (I/O is measured against its ideal, not a bare loop)."""


def backend_of(system: System) -> str:
    """ "PostgreSQL" from "errands (PostgreSQL)"; "SQLite" from "errands (SQLite, synchronous=full)"."""
    return system.label.split("(", 1)[1].split(",")[0].rstrip(")")


def bare_rows(agg: dict[str, dict[str, dict[str, Any]]], pairs: dict[str, str] = BARE_FOR,
              figures: Sequence[str] = ()) -> list[dict[str, Any]]:
    """errands against the bare loop of the same backend and run, figure by figure (issue 17's table).

    ``ratio`` is errands / bare: above 1 is better for throughput, below 1 for CPU per job.  Pickup has
    no bare counterpart (the bare loop never idles), so its row has errands' figure only.
    """
    rows = []
    for ekey, bkey in pairs.items():
        for fig in figures or BARE_FIGURES:
            title, unit, higher = FIGURES[fig]
            mine = agg.get(ekey, {}).get(fig, {"status": "not run"})
            bare = agg.get(bkey, {}).get(fig, {"status": "not run"})
            if mine["status"] in ("n/a", "not run"):
                continue
            ratio = (mine["median"] / bare["median"] if mine["status"] == "ok" and bare["status"] == "ok"
                     and bare["median"] else None)
            rows.append({"backend": backend_of(BY_KEY[ekey]), "figure": fig, "title": title, "unit": unit,
                         "higher_is_better": higher, "errands": fmt(mine, unit),
                         "bare": fmt(bare, unit) if bare["status"] not in ("n/a", "not run") else "—",
                         "ratio": ratio})
    return rows


def bare_table(rows: list[dict[str, Any]], loop: str = "bare loop") -> str:
    """``bare_rows`` as a Markdown table: figure | errands | bare loop | errands / bare."""
    out = [f"| figure | errands | {loop} | errands / {loop} |", "|---|--:|--:|--:|"]
    for r in rows:
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        out.append(f"| {r['backend']} {r['title']} ({r['unit']}) | {r['errands']} | {r['bare']} | {ratio} |")
    return "\n".join(out)


CHART_FIGURES = ["enqueue", "bulk", "drain1", "drain2", "cpu1", "cpu2", "cpu_enqueue", "cpu_bulk", "latency_p50",
                 "latency_p99"]
"""The table's columns that the chart draws, all systems side by side (I/O and scale are errands' alone)."""


def _chart_role(s: System) -> str:
    if s.key.startswith("bare"):
        return "bare"
    if s.key.startswith("errands"):
        return "errands-variant" if s.url_query else "errands"
    return "peer"


def chart_panels(agg: dict[str, dict[str, dict[str, Any]]]) -> list[chart.Panel]:
    """One panel per figure; in each, the systems grouped by backend, errands first and the bare loop last."""
    groups_of = [("PostgreSQL", "pg"), ("MariaDB", "mysql"), ("SQLite", "sqlite"), ("Redis", "redis")]
    panels = []
    for fig in CHART_FIGURES:
        title, unit, higher = FIGURES[fig]
        groups = []
        for name, kind in groups_of:
            bars = []
            for s in (x for x in SYSTEMS if x.kind == kind):
                cell = agg.get(s.key, {}).get(fig, {"status": "not run"})
                if cell["status"] in ("n/a", "not run"):
                    continue
                label = s.label.split(" (")[0] + (", " + s.url_query.lstrip("?") if s.url_query else "")
                if cell["status"] != "ok":
                    bars.append(chart.Bar(label, None, _chart_role(s), note=fmt(cell, unit, 40)))
                    continue
                note = ""
                bare = agg.get(BARE_FOR.get(s.key, ""), {}).get(fig, {})
                if bare.get("status") == "ok" and bare.get("median"):
                    note = f"{cell['median'] / bare['median']:.2f}x bare"
                bars.append(chart.Bar(label, cell["median"], _chart_role(s), fmt(cell, unit), note))
            groups.append(chart.Group(name, bars))
        panels.append(chart.Panel(title, unit, higher, groups))
    return panels


def write_chart(report: dict[str, Any], path: str) -> None:
    """The run's table as a grouped bar chart (bench/chart.py), written to ``path``."""
    p, m = report["params"], report["machine"]
    title = (f"errands benchmark, {report['started']} ({'QUICK' if p['quick'] else 'full'}: {p['jobs']:,} jobs a run, "
             f"median of {p['reps']})")
    subtitle = (f"{m['cpus']} CPUs; load average {m['load_average_at_start']} at start, "
                f"{m.get('load_average_at_end')} at end; noisy when the load is high.\n"
                "\"x bare\": errands / the bare loop of the same database in the same run. "
                "CPU/job 1p, 2p: the worker processes' own CPU time per job; enqueue, bulk: the enqueuing "
                "process's (never the database server's).")
    svg = chart.render(chart_panels(report["results"]), title, subtitle)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(svg)
    os.replace(tmp, path)


def markdown(report: dict[str, Any], tbl: str, ratio_lines: list[str]) -> str:
    p = report["params"]
    out = [f"# errands benchmark — {report['started']}", "",
           f"Mode: {'QUICK' if p['quick'] else 'full'}; {p['jobs']:,} jobs per enqueue/bulk/drain run, "
           f"{p['samples']} latency samples {p['interval'] * 1000:.0f} ms apart, median of {p['reps']} run(s). "
           f"Wall time {report['wall_seconds']:.0f} s. "
           f"Load average at start {report['machine']['load_average_at_start']}, "
           f"at end {report['machine'].get('load_average_at_end')}.", "",
           "Throughput in jobs/s (higher is better); pickup latency in ms (lower is better). "
           "Drains are timed from the first handled job to the N-th; see docs/performance.md. "
           "CPU/job 1p, 2p: CPU time of the worker processes (their own, not the database server's) over the same "
           "window, per job; CPU/job enqueue and bulk: the enqueuing process's CPU per job over its enqueue "
           "calls, its driver's included (lower is better).", "",
           tbl, "", f"![the table as a chart]({report['chart']})", "",
           "## errands against the bare loop (same database, same run)", "",
           "errands / bare: above 1 means errands did better on throughput, below 1 on CPU per job. "
           "The bare loop never idles, so pickup has no bare figure.", "",
           bare_table(report.get("bare_ratios", [])), "",
           "## errands against the bare leased loop (issue 29; same database, same run)", "",
           "The bare leased loop claims with a lease UPDATE, runs a no-op and DELETEs on settle, with errands' "
           "durability (bench/bare_leased_worker.py): the limit of a leased design. The bare loop above is the "
           "older one (PostgreSQL and MariaDB: lock and delete in one transaction, no lease).", "",
           bare_table(report.get("leased_ratios", []), "bare leased loop"), "",
           "## errands' ratios", "", *[f"- {x}" for x in ratio_lines], "",
           "## SQLite durability: synchronous=full against normal (issue 11)", "",
           *[f"- {x}" for x in report.get("sync_ratios", [])], ""]
    failures = failure_lines(report["results"])
    if failures:
        out += ["## Failures", ""] + [f"- {x}" for x in failures] + [""]
    out += ["## Settings", ""]
    for key, settings in report["settings"].items():
        out.append(f"- **{key}**")
        for k, v in (settings.items() if isinstance(settings, dict) else [("", settings)]):
            out.append(f"  - {k}: {v}" if k else f"  - {v}")
    out += ["", "## Versions", ""]
    for key, versions in report["versions"].items():
        out.append(f"- **{key}**: " + (", ".join(f"{k} {v}" for k, v in versions.items())
                                       if isinstance(versions, dict) else str(versions)))
    out += ["", "## Servers", ""]
    for key, facts in report["servers"].items():
        out.append(f"- **{key}**: " + ", ".join(f"{k} {v}" for k, v in facts.items()))
    m = report["machine"]
    out += ["", "## Machine", "", f"- {m['cpus']} CPUs ({m['cpu_model']}), Linux {m['kernel']}, Python {m['python']}",
            ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer jobs, one repetition (under 3 minutes)")
    ap.add_argument("--jobs", type=int, help="jobs per enqueue/bulk/drain run (default 20,000; QUICK 1,000)")
    ap.add_argument("--reps", type=int, help="repetitions; the table shows the median (default 3; QUICK 1)")
    ap.add_argument("--systems", help="comma list of system keys to run (default all): "
                                      + ", ".join(s.key for s in SYSTEMS))
    ap.add_argument("--no-scale", action="store_true", help="skip errands' scale measurement")
    ap.add_argument("--no-install", action="store_true", help="do not create or update bench/.venv-peers")
    opts = ap.parse_args()
    p = Params.make(opts.quick, opts.jobs, opts.reps, scale=not opts.no_scale)
    wanted = set(opts.systems.split(",")) if opts.systems else {s.key for s in SYSTEMS}
    unknown = wanted - set(BY_KEY)
    if unknown:
        ap.error(f"unknown system(s): {', '.join(sorted(unknown))}")

    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    machine = machine_facts()
    drop_leftovers()
    install_failures = ensure_peers_venv(install=not opts.no_install)

    # Which systems can run at all, and their settings/versions (the scripts' "info" mode).
    broken: dict[str, str] = {}
    settings: dict[str, Any] = {}
    versions: dict[str, Any] = {}
    for s in SYSTEMS:
        if s.key not in wanted:
            continue
        if s.peer:
            if not os.path.exists(PEERS_PY):
                broken[s.key] = install_failures.get("*", "the peers' venv does not exist")
                continue
            missing = [install_failures[pk] for pk in s.packages if pk in install_failures]
            if missing or "*" in install_failures:
                broken[s.key] = (missing or [install_failures["*"]])[0]
                continue
        workdir = tempfile.mkdtemp(prefix="errands_bench_info_")
        info = run_script(s, "info", "", workdir, p, 60)
        shutil.rmtree(workdir, ignore_errors=True)
        if "error" in info:
            if s.peer:
                broken[s.key] = info["error"]
            continue
        name = s.label.split(" (")[0] if not s.key.startswith("errands") else "errands"
        if s.key.startswith("bare"):
            name = "bare leased loops" if s.key.startswith("bare-leased") else "bare SQL loops"
        settings.setdefault(name, info.get("settings", {}))
        if info.get("versions"):
            versions.setdefault(name, info["versions"])

    plan = [(mode, s) for mode in ("enqueue", "bulk", "drain1", "drain2", "latency", "io")
            for s in SYSTEMS if s.key in wanted and mode in s.modes]
    if p.scale_big:
        plan += [(mode, s) for mode in ("scale_small", "scale_big") for s in SYSTEMS
                 if s.key in wanted and mode in s.modes]
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    total = len(plan) * p.reps
    n = 0
    for rep in range(p.reps):
        for mode, s in plan:
            if mode.startswith("scale") and rep > 0:
                continue  # the scale test runs once: it is about growth, not a fine figure
            n += 1
            if s.key in broken:
                result: dict[str, Any] = {"error": broken[s.key]}
            else:
                t = time.perf_counter()
                result = measure(s, mode, p)
                shown = ("failed: " + result["error"][:90]) if "error" in result else (
                    "n/a" if "na" in result else f"{result.get('value', 0):,.1f} {result.get('unit', '')}")
                print(f"  [{n}/{total}] {s.key:16} {mode:11} {shown}  ({time.perf_counter() - t:.1f}s)",
                      file=sys.stderr, flush=True)
            raw.setdefault(s.key, {}).setdefault(mode, []).append(result)

    agg = aggregate(raw)
    tbl = table(agg, p)
    ratio_lines = ratios(agg)
    sync_lines = sync_ratios(agg)
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    wall = time.perf_counter() - t0
    settings["benchmark"] = {
        "drain method": "pre-fill N jobs, start the workers, time from the first handled job to the N-th "
                        "(each job writes one line to a FIFO the benchmark reads)",
        "latency method": f"one idle worker process; {p.samples} jobs stamped with time.time(), "
                          f"{p.interval * 1000:.0f} ms apart, after a warm-up job and 0.3 s idle; "
                          "the job records time.time() - stamp",
        "fresh database": "one per run: errands_bench_* on PostgreSQL/MariaDB, a temp SQLite file, "
                          f"Redis database {REDIS_URL} emptied",
        "scale": (f"errands only, 1 worker process: first {p.scale_measured_small:,} of {p.scale_small:,} waiting jobs "
                  f"vs first {p.scale_measured_big:,} of {p.scale_big:,} waiting; worker RSS (VmRSS of the forked "
                  "worker processes) from the first handled job to the last") if p.scale_big else "skipped",
    }
    versions["peers' venv"] = {"path": os.path.relpath(PEERS_VENV, ROOT),
                               "install failures": install_failures or "none"}
    versions["errands source"] = errands_revision()
    versions["all packages, project venv"] = pip_freeze(PROJECT_PY)
    if os.path.exists(PEERS_PY):
        versions["all packages, peers' venv"] = pip_freeze(PEERS_PY)
    stamp = started.strftime("%Y%m%dT%H%M%SZ") + ("-quick" if p.quick else "")
    bare = bare_rows(agg)
    leased = bare_rows(agg, LEASED_FOR, LEASED_FIGURES)
    report = {"started": started.isoformat(timespec="seconds"), "wall_seconds": round(wall, 1),
              "params": p.__dict__, "machine": machine, "servers": server_facts(), "versions": versions,
              "settings": settings, "results": agg, "raw": raw, "ratios": ratio_lines, "sync_ratios": sync_lines,
              "table": tbl, "bare_ratios": bare, "leased_ratios": leased, "chart": f"{stamp}.svg"}
    md = markdown(report, tbl, ratio_lines)

    os.makedirs(RESULTS, exist_ok=True)
    for name, text in ((f"{stamp}.json", json.dumps(report, indent=1)), (f"{stamp}.md", md),
                       ("latest.json", json.dumps(report, indent=1)), ("latest.md", md)):
        tmp = os.path.join(RESULTS, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, os.path.join(RESULTS, name))
    charts = [os.path.join(RESULTS, f"{stamp}.svg"), os.path.join(RESULTS, "latest.svg")]
    if not p.quick and wanted == set(BY_KEY):
        charts.append(DOCS_CHART)  # docs/performance.md shows the latest full run of every system
    for path in charts:
        write_chart(report, path)

    print()
    print(f"errands benchmark ({'QUICK' if p.quick else 'full'}: {p.jobs:,} jobs per run, "
          f"median of {p.reps}; jobs/s higher is better, ms lower is better)")
    print(tbl)
    print()
    print("errands' ratios (errands / other, same figure):")
    for line in ratio_lines:
        print("  " + line)
    print("\nSQLite durability (issue 11): an fsync per commit, synchronous=full / normal (errands' default):")
    for line in sync_lines:
        print("  " + line)
    failures = failure_lines(agg)
    if failures:
        print("\nfailures:")
        for x in failures:
            print("  " + x)
    print("\nerrands against the bare loop of the same database (same run):")
    print(bare_table(bare))
    print("\nerrands against the bare leased loop (lease UPDATE, no-op, DELETE on settle; same run):")
    print(bare_table(leased, "bare leased loop"))
    print(f"\nresults: {os.path.relpath(os.path.join(RESULTS, stamp + '.json'), ROOT)} (+ .md, .svg, latest.json, "
          f"latest.md, latest.svg"
          + (f", {os.path.relpath(DOCS_CHART, ROOT)}" if DOCS_CHART in charts else "")
          + f"); wall time {wall:.0f} s; load average {machine['load_average_at_start']} -> "
          f"{machine['load_average_at_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
