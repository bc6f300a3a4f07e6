"""What a job costs the database (issue 29 goal 2): statements, commits, WAL and server CPU per job.

    .venv/bin/python bench/costs.py [--backends postgres,mariadb,sqlite] [--jobs 20000] [--reps 2]
                                    [--peers]     # also PgQueuer (bench/.venv-peers), PostgreSQL only
                                    [--wal-records]   # PostgreSQL: which WAL records made the bytes
                                    [--schema-sql "ALTER TABLE {jobs} SET (fillfactor = 70)"]  # a variant

Measuring only; nothing here times or asserts.  For each backend and repetition, a fresh database
(bench/run.py's FreshDatabase), the schema made by errands (not counted), then two phases, each a
process of its own so that its connections close (PostgreSQL flushes a backend's statistics when
it exits) before the counters are read again:

1. **enqueue**: N no-op jobs through ``app.enqueue_many`` in calls of 1,000 (the ``bulk`` figure of
   ``make bench``);
2. **drain**: ``errands worker -p 1 -c 10 --burst`` claims, runs and settles them all.

Per phase and job:

- **statements** and **write commits**, counted client-side in errands' processes
  (bench/stmt_count.py wraps the drivers; every backend);
- PostgreSQL: **commits** as the server counts them (``pg_stat_database.xact_commit`` of the fresh
  database: every transaction, read-only ones too) and the tuples inserted, updated (of which HOT)
  and deleted, all per database so other clients of the shared server do not count; **WAL bytes**
  (``pg_wal_lsn_diff`` of ``pg_current_wal_lsn()`` around the phase: server-wide, so another
  client's writes in the same moment count too: the idle rate measured just before is printed);
- MariaDB: ``SHOW GLOBAL STATUS`` deltas (``Com_*``, ``Handler_commit``, ``Innodb_os_log_written``,
  the redo log bytes): server-wide, with the same idle rate beside them (the sampler's own reads of
  the process list are taken off ``Com_select``);
- **server CPU**: the CPU time (``/proc/.../schedstat``, nanoseconds) of the server's processes or
  threads that served the fresh database's connections, sampled every 20 ms while they live
  (PostgreSQL: the backends ``pg_stat_activity`` lists for the database; MariaDB: the connection
  threads, ``information_schema.PROCESSLIST.TID``), plus the shared background work
  (PostgreSQL: postmaster, walwriter, checkpointer, background writer; MariaDB: the whole
  ``mariadbd`` process, ``utime + stime`` in clock ticks), printed apart because other clients
  share it.  A MariaDB connection thread is cached and reused: its CPU counts from its value
  when the phase began.
  SQLite has no server: its work is in the worker's own CPU (``make bench``'s CPU/job).

``--wal-records`` (PostgreSQL 15+, ``pg_walinspect``): each phase's WAL records grouped by type and
relation (bench/wal_records.py), this database's apart from the rest of the server's; a physical
replication slot holds the phase's segments until they are read.  ``--schema-sql``: statements run
after errands made its schema and before the phases (not counted), to measure a design variant (a
fillfactor, an index dropped or redefined) before writing it as a migration.

``--peers``: PgQueuer's ``drain`` script (prefill in batches + drain, bench/peers/pgqueuer_bench.py)
under the same server-side counters, as one phase; compare it with errands' enqueue + drain.
Writes bench/results/costs-<timestamp>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import common  # noqa: E402
import stmt_count  # noqa: E402
import wal_records  # noqa: E402
from run import PEERS_PY, FreshDatabase, _my_admin, _pg_admin  # noqa: E402

SCHEMA_SQL = [""]
"""--schema-sql: statements run after errands made its schema (``{jobs}`` for the jobs table), not counted."""
KINDS = {"postgres": "pg", "mariadb": "mysql", "sqlite": "sqlite"}
ENQUEUE_BATCH = 1000
CONCURRENCY = 10
SAMPLE_EVERY = 0.02
IDLE_SECONDS = 1.0
MY_STATUS = ("Com_select", "Com_insert", "Com_update", "Com_delete", "Com_begin", "Com_commit", "Com_rollback",
             "Handler_commit", "Innodb_os_log_written", "Innodb_data_written", "Questions")
PG_BACKGROUND = ("walwriter", "checkpointer", "background writer", "autovacuum launcher", "autovacuum worker",
                 "logical replication launcher", "walsender", "archiver")


def cpu_ns(path: str) -> int | None:
    """Nanoseconds a process or thread ran (first field of ``schedstat``); None when it is gone."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------------------- servers


class PgServer:
    """Counters of one fresh PostgreSQL database (per database) and the server's WAL position."""

    kind = "pg"

    def __init__(self, dbname: str) -> None:
        self.db = dbname
        self.conn = _pg_admin()
        self.queries = 0

    def counters(self) -> dict[str, float]:
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = self.conn.execute(
            "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, tup_fetched, tup_returned, "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') FROM pg_stat_database WHERE datname = %s",
            (self.db,)).fetchone()
        names = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted", "tup_fetched",
                 "tup_returned", "wal_bytes")
        return {n: float(v or 0) for n, v in zip(names, row, strict=True)}

    def hot_updates(self, url: str) -> dict[str, float]:
        """Updates of the database's tables and how many were HOT (read once at the end: it connects there)."""
        import psycopg

        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT pg_stat_force_next_flush()")
            row = c.execute("SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0) "
                            "FROM pg_stat_user_tables").fetchone()
        return {"n_tup_upd": float(row[0]), "n_tup_hot_upd": float(row[1])}

    def tasks(self) -> dict[str, str]:
        """schedstat path -> bucket ("backends" of this database, "background" shared)."""
        rows = self.conn.execute("SELECT pid, datname, backend_type FROM pg_stat_activity "
                                 "WHERE datname = %s OR backend_type = ANY(%s)", (self.db, list(PG_BACKGROUND)))
        out = {f"/proc/{pid}/schedstat": ("backends" if dat == self.db else "background") for pid, dat, _ in rows}
        postmaster = self.postmaster()
        if postmaster:
            out[f"/proc/{postmaster}/schedstat"] = "background"
        return out

    def postmaster(self) -> int | None:
        if not hasattr(self, "_postmaster"):
            pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            try:
                with open(f"/proc/{pid}/stat") as f:
                    self._postmaster: int | None = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                self._postmaster = None
        return self._postmaster

    def quiet(self, timeout: float = 15.0) -> None:
        """Wait until no connection to the database is left (their statistics are flushed at exit)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n = self.conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.db,)).fetchone()[0]
            if not n:
                return
            time.sleep(0.05)

    def close(self) -> None:
        self.conn.close()


class MyServer:
    """MariaDB's global status (server-wide) and the connection threads of one fresh database."""

    kind = "mysql"

    def __init__(self, dbname: str) -> None:
        self.db = dbname
        self.conn = _my_admin()
        self.queries = 0  # the sampler's SELECTs, taken off Com_select
        found = subprocess.run(["pidof", "mariadbd", "mysqld"], capture_output=True, text=True).stdout.split()
        self.pid = int(found[0]) if found else None  # None: the server runs elsewhere, no CPU figure

    def counters(self) -> dict[str, float]:
        with self.conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN (" + ", ".join(["%s"] * len(MY_STATUS)) + ")",
                        MY_STATUS)
            out = {k: float(v) for k, v in cur.fetchall()}
        out["Com_select"] = out.get("Com_select", 0.0) - self.queries
        out["Questions"] = out.get("Questions", 0.0) - self.queries
        # The whole server process's CPU (utime + stime of /proc/<pid>/stat: exited threads too), seconds.
        if self.pid is not None:
            with open(f"/proc/{self.pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            out["mariadbd_cpu_s"] = (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
        return out

    def tasks(self) -> dict[str, str]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT TID FROM information_schema.PROCESSLIST WHERE DB = %s", (self.db,))
            tids = [r[0] for r in cur.fetchall()]
        self.queries += 1
        if self.pid is None:
            return {}
        return {f"/proc/{self.pid}/task/{tid}/schedstat": "backends" for tid in tids if tid}

    def known(self) -> list[str]:
        """Every thread of mariadbd now: a cached thread may serve one of the database's connections later."""
        if self.pid is None:
            return []
        try:
            return [f"/proc/{self.pid}/task/{tid}/schedstat" for tid in os.listdir(f"/proc/{self.pid}/task")]
        except OSError:
            return []

    def quiet(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = %s", (self.db,))
                n = cur.fetchone()[0]
            self.queries += 1
            if not n:
                return
            time.sleep(0.05)

    def close(self) -> None:
        self.conn.close()


class CpuSampler:
    """Samples the CPU time of the server's tasks serving the database, every SAMPLE_EVERY seconds.

    A task seen at the start counts from its value then; one that appears later counts from zero
    (a new backend or connection thread: all its CPU is the phase's).  What a task spends between
    its last sample and its exit is missed (a final statement and the disconnect)."""

    def __init__(self, tasks: Callable[[], dict[str, str]], known: Callable[[], list[str]] = list) -> None:
        """``known()``: tasks whose value at the start is the baseline should they serve the database later
        (MariaDB's cached connection threads, reused from earlier connections)."""
        self.tasks = tasks
        self.start: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self.bucket: dict[str, str] = {}
        self._stop = threading.Event()
        for path in known():
            v = cpu_ns(path)
            if v is not None:
                self.start[path] = v
        for path, bucket in tasks().items():
            v = cpu_ns(path)
            if v is not None:
                self.start[path] = self.last[path] = v
                self.bucket[path] = bucket
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for path, bucket in self.tasks().items():
            v = cpu_ns(path)
            if v is None:
                continue
            self.bucket.setdefault(path, bucket)
            self.start.setdefault(path, 0)
            self.last[path] = max(v, self.last.get(path, self.start[path]))

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            try:
                self._sample()
            except Exception:  # a sample lost to a busy server is not fatal
                pass

    def stop(self) -> dict[str, float]:
        """CPU seconds per bucket since the start."""
        self._stop.set()
        self._thread.join()
        self._sample()
        out: dict[str, float] = {}
        for path, last in self.last.items():
            b = self.bucket.get(path)
            if b is None:
                continue
            out[b] = out.get(b, 0.0) + (last - self.start[path]) / 1e9
        return out


def server_for(kind: str, dbname: str) -> PgServer | MyServer | None:
    return {"pg": PgServer, "mysql": MyServer}.get(kind, lambda _: None)(dbname)  # type: ignore[operator]


# ---------------------------------------------------------------------------- phases


def _child(args: list[str], env: dict[str, str], log: str, timeout: float) -> None:
    proc = common.start_workers([sys.executable, *args], env, log, cwd=HERE)
    try:
        if proc.wait(timeout=timeout):
            raise RuntimeError(f"{args[0]} exited {proc.returncode}: " + common.tail(log, 5))
    finally:
        common.stop_workers(proc)


def measured(server: Any, run: Callable[[], None]) -> dict[str, Any]:
    """Counters, WAL and server CPU around ``run()``; the idle rate of the same counters just before."""
    out: dict[str, Any] = {}
    if server is not None:
        server.quiet()
        idle0, t = server.counters(), time.perf_counter()
        known = getattr(server, "known", list)
        idle_cpu = CpuSampler(server.tasks, known)
        time.sleep(IDLE_SECONDS)
        cpu_idle = idle_cpu.stop()
        idle1 = server.counters()
        dt = time.perf_counter() - t
        out["idle_per_s"] = {k: (idle1[k] - idle0[k]) / dt for k in idle0} | {
            f"cpu_{k}_s": v / dt for k, v in cpu_idle.items()}
        before, sampler = server.counters(), CpuSampler(server.tasks, known)
    t0 = time.perf_counter()
    run()
    out["seconds"] = round(time.perf_counter() - t0, 3)
    if server is not None:
        cpu = sampler.stop()
        server.quiet()
        after = server.counters()
        out["server"] = {k: after[k] - before[k] for k in before}
        if "wal_bytes" in before:  # the phase's WAL range, for --wal-records
            out["wal_range"] = [before["wal_bytes"], after["wal_bytes"]]
        out["server_cpu_s"] = cpu
    return out


def errands_run(kind: str, url: str, jobs: int, workdir: str, timeout: float,
                wal: bool = False) -> dict[str, Any]:
    """Schema (not counted), then the enqueue phase and the drain phase, each measured; with ``wal``
    (PostgreSQL), the WAL records of each phase grouped (bench/wal_records.py)."""
    env = {"PYTHONPATH": os.pathsep.join([HERE, os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")])}
    log = os.path.join(workdir, "child.log")
    _child([__file__, "--child", "migrate", "--db-url", url], env | {"BENCH_SCHEMA_SQL": SCHEMA_SQL[0]}, log, timeout)
    dbname = url.rsplit("/", 1)[1].split("?")[0]
    server = server_for(kind, dbname)
    phases: dict[str, Any] = {}
    inspect = wal_inspector(url) if wal and isinstance(server, PgServer) else None
    try:
        for phase in ("enqueue", "drain"):
            counts = os.path.join(workdir, f"{phase}.statements")
            penv = env | {stmt_count.ENV: counts}
            if phase == "enqueue":
                def go(penv: dict[str, str] = penv) -> None:
                    _child([__file__, "--child", "enqueue", "--db-url", url, "--jobs", str(jobs)], penv, log, timeout)
            else:
                def go(penv: dict[str, str] = penv) -> None:
                    collector = common.Collector(workdir)
                    try:
                        _child(["-m", "errands", "--app", "costs_app:app", "--database-url", url, "--log-level",
                                "WARNING", "worker", "-p", "1", "-c", str(CONCURRENCY), "--burst"],
                               penv | collector.env, log, timeout)
                        collector.wait_for(jobs, 5.0)
                        if collector.count != jobs:
                            raise RuntimeError(f"the worker handled {collector.count} of {jobs} jobs")
                    finally:
                        collector.close()
            if inspect is not None:  # no checkpoint recycles the phase's WAL before it is read
                wal_records.hold(server.conn)
            try:
                result = measured(server, go)
                if inspect is not None:
                    result["wal_records"] = inspect(*result.get("wal_range", [0, 0]))
            finally:
                if inspect is not None:
                    wal_records.release(server.conn)
            result["statements"] = stmt_count.read(counts)
            phases[phase] = result
        if isinstance(server, PgServer):
            phases["tables"] = server.hot_updates(url)
    finally:
        if server is not None:
            server.close()
    return phases


def wal_inspector(url: str) -> Callable[[float, float], list[dict[str, Any]]]:
    """Made before the phases (pg_walinspect and the relations' names); called after them (it connects)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        oid, names = wal_records.prepare(c)

    def inspect(start: float, end: float) -> list[dict[str, Any]]:
        try:
            with psycopg.connect(url, autocommit=True) as c:
                return wal_records.breakdown(c, start, end, oid, names)
        except psycopg.Error as e:  # a segment already recycled: no breakdown, the totals stand
            return [{"rmgr": "breakdown unavailable", "type": type(e).__name__, "relation": "-", "records": 0,
                     "bytes": 0, "fpi_bytes": 0}]
    return inspect


def pgqueuer_run(url: str, jobs: int, workdir: str, timeout: float) -> dict[str, Any]:
    """PgQueuer's drain script (its prefill + drain) as one phase, server-side counters only."""
    if not os.path.exists(PEERS_PY):
        return {"error": "the peers' venv (bench/.venv-peers) does not exist: run make bench once"}
    server = PgServer(url.rsplit("/", 1)[1])
    out: dict[str, Any] = {}

    def go() -> None:
        r = subprocess.run([PEERS_PY, os.path.join(HERE, "peers", "pgqueuer_bench.py"), "--mode", "drain", "--jobs",
                            str(jobs), "--processes", "1", "--db-url", url, "--workdir", workdir, "--timeout",
                            str(timeout)], capture_output=True, text=True, timeout=timeout + 60, cwd=workdir)
        line = [x for x in r.stdout.splitlines() if x.startswith("{")]
        out["script"] = json.loads(line[-1]) if line else {"error": r.stderr[-300:]}

    try:
        out["total"] = measured(server, go)
    finally:
        server.close()
    return out


# ---------------------------------------------------------------------------- the children


def child(mode: str, url: str, jobs: int) -> None:
    stmt_count.install()
    from errands_app import app, noop

    app.use_database(url)
    if mode == "migrate":
        app.migrate()
        variant = os.environ.get("BENCH_SCHEMA_SQL", "")
        if variant:  # --schema-sql: a design variant measured against the shipped schema

            def apply(cur: Any) -> None:
                for statement in filter(str.strip, variant.split(";")):
                    cur.execute(app.store.dialect.q(statement))

            app.store.db.run(apply)
        return
    done = 0
    while done < jobs:
        k = min(ENQUEUE_BATCH, jobs - done)
        app.enqueue_many([noop.prepare(0.0) for _ in range(k)])
        done += k
    app.store.close()


# ---------------------------------------------------------------------------- report


def per_job(phase: dict[str, Any], jobs: int) -> dict[str, float | None]:
    """The figures of one phase, per job."""
    st = phase.get("statements", {})
    server = phase.get("server", {})
    cpu = phase.get("server_cpu_s", {})
    n = float(jobs)
    statements = sum(v for k, v in st.items() if not k.startswith("+")) if st else None
    out: dict[str, float | None] = {
        "statements": statements / n if statements is not None else None,
        "write_commits": st.get("+COMMIT", 0) / n if st else None,
    }
    if "xact_commit" in server:
        out |= {"pg_commits": server["xact_commit"] / n, "wal_bytes": server["wal_bytes"] / n,
                "tup_ins": server["tup_inserted"] / n, "tup_upd": server["tup_updated"] / n,
                "tup_del": server["tup_deleted"] / n}
    if "Handler_commit" in server:
        out |= {"my_handler_commits": server["Handler_commit"] / n, "my_com_commits": server["Com_commit"] / n,
                "redo_bytes": server["Innodb_os_log_written"] / n, "my_questions": server["Questions"] / n,
                "mariadbd_cpu_us": server["mariadbd_cpu_s"] * 1e6 / n if "mariadbd_cpu_s" in server else None}
    if cpu:
        out["server_cpu_us"] = cpu.get("backends", 0.0) * 1e6 / n
        if "background" in cpu:  # PostgreSQL's; MariaDB's is in the whole process's figure
            out["background_cpu_us"] = cpu["background"] * 1e6 / n
    idle, secs = phase.get("idle_per_s", {}), phase.get("seconds", 0.0)
    for key, counter, scale in IDLE_OF:
        if key in out and counter in idle:
            out["idle_" + key] = idle[counter] * secs * scale / n
    return out


IDLE_OF = [("wal_bytes", "wal_bytes", 1.0), ("redo_bytes", "Innodb_os_log_written", 1.0),
           ("my_questions", "Questions", 1.0), ("my_handler_commits", "Handler_commit", 1.0),
           ("mariadbd_cpu_us", "mariadbd_cpu_s", 1e6), ("background_cpu_us", "cpu_background_s", 1e6)]
"""Server-wide figures and the counter whose idle rate (measured just before the phase, times the phase's
duration) says how much of them other clients could have written: printed in parentheses."""


FIGURES = [("statements", "statements", "{:.3f}"), ("write_commits", "write commits (client)", "{:.4f}"),
           ("pg_commits", "commits (pg_stat_database)", "{:.4f}"), ("my_handler_commits", "Handler_commit", "{:.4f}"),
           ("my_questions", "statements (Questions)", "{:.3f}"), ("wal_bytes", "WAL bytes", "{:,.0f}"),
           ("redo_bytes", "redo bytes (Innodb_os_log_written)", "{:,.0f}"), ("tup_ins", "tuples inserted", "{:.3f}"),
           ("tup_upd", "tuples updated", "{:.3f}"),
           ("hot_share", "HOT share of the updates (PG)", "{:.1%}"), ("tup_del", "tuples deleted", "{:.3f}"),
           ("server_cpu_us", "server CPU, its connections (µs)", "{:.1f}"),
           ("background_cpu_us", "server CPU, shared background (µs)", "{:.1f}"),
           ("mariadbd_cpu_us", "mariadbd whole process CPU (µs, server-wide)", "{:.1f}")]


def span(values: list[float | None], fmt: str) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "—"
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def table(results: dict[str, list[dict[str, Any]]], jobs: int) -> str:
    """Per backend and phase (enqueue, drain, both), each figure per job, the range over repetitions."""
    cols: list[tuple[str, list[dict[str, float | None]]]] = []
    for system, runs in results.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            continue
        if "total" in ok[0]:
            cols.append((f"{system} prefill + drain", [per_job(r["total"], jobs) for r in ok]))
            continue
        for phase in ("enqueue", "drain"):
            cols.append((f"{system} {phase}", [per_job(r[phase], jobs) for r in ok]))
        cols.append((f"{system} both", [sum_figures(per_job(r["enqueue"], jobs), per_job(r["drain"], jobs))
                                        | hot_share(r.get("tables")) for r in ok]))
    lines = ["| per job | " + " | ".join(c for c, _ in cols) + " |", "|---|" + "--:|" * len(cols)]
    for key, title, fmt in FIGURES:
        cells = [span([r.get(key) for r in runs], fmt) for _, runs in cols]
        idle = [span([r.get("idle_" + key) for r in runs], fmt) for _, runs in cols]
        cells = [c if i == "—" or c == "—" else f"{c} (idle {i})" for c, i in zip(cells, idle, strict=True)]
        if any(c != "—" for c in cells):
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def wal_tables(results: dict[str, list[dict[str, Any]]], jobs: int) -> str:
    """--wal-records: per system, repetition and phase, the records that made the WAL."""
    out = []
    for system, runs in results.items():
        for i, r in enumerate(runs):
            for phase in ("enqueue", "drain"):
                groups = r.get(phase, {}).get("wal_records") if isinstance(r.get(phase), dict) else None
                if groups:
                    out.append(f"\n{system}, repetition {i + 1}, {phase}: WAL records per job\n\n"
                               + wal_records.table(groups, jobs) + "\n")
    return "".join(out)


def hot_share(tables: dict[str, float] | None) -> dict[str, float | None]:
    """The share of the updates PostgreSQL made HOT (no index entry written): the lease UPDATE is not,
    while an index covers or filters on a column it changes."""
    if not tables or not tables.get("n_tup_upd"):
        return {}
    return {"hot_share": tables["n_tup_hot_upd"] / tables["n_tup_upd"]}


def sum_figures(a: dict[str, float | None], b: dict[str, float | None]) -> dict[str, float | None]:
    return {k: (a[k] or 0.0) + (b.get(k) or 0.0) if a.get(k) is not None else None for k in a}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="postgres,mariadb,sqlite")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--peers", action="store_true", help="also PgQueuer on PostgreSQL (needs bench/.venv-peers)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--schema-sql", default="", help="statements (';'-separated, {jobs} for the jobs table) run "
                    "after errands made its schema, before the phases: a design variant to measure")
    ap.add_argument("--wal-records", action="store_true",
                    help="PostgreSQL: group each phase's WAL records by type and relation (pg_walinspect)")
    ap.add_argument("--child", choices=["migrate", "enqueue"], help=argparse.SUPPRESS)
    ap.add_argument("--db-url", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        child(opts.child, opts.db_url, opts.jobs)
        return 0
    SCHEMA_SQL[0] = opts.schema_sql
    started = datetime.now(timezone.utc)
    results: dict[str, list[dict[str, Any]]] = {}
    for rep in range(opts.reps):
        for backend in opts.backends.split(","):
            kind = KINDS[backend]
            systems = [("errands " + backend, "errands")]
            if opts.peers and kind == "pg":
                systems.append(("PgQueuer", "pgqueuer"))
            for label, what in systems:
                workdir = tempfile.mkdtemp(prefix="errands_costs_")
                t = time.perf_counter()
                try:
                    with FreshDatabase(kind, "costs") as db:
                        r = (errands_run(kind, db.url, opts.jobs, workdir, opts.timeout, opts.wal_records)
                             if what == "errands"
                             else pgqueuer_run(db.url, opts.jobs, workdir, opts.timeout))
                except Exception as e:
                    r = {"error": f"{type(e).__name__}: {e}"[:400]}
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
                print(f"  [{rep + 1}/{opts.reps}] {label}: {'failed: ' + r['error'] if 'error' in r else 'ok'} "
                      f"({time.perf_counter() - t:.1f}s)", file=sys.stderr, flush=True)
                results.setdefault(label, []).append(r)
    tbl = table(results, opts.jobs)
    load = [round(x, 2) for x in os.getloadavg()]
    head = (f"What a job costs the database, {started.isoformat(timespec='seconds')}: {opts.jobs:,} no-op jobs "
            f"enqueued in calls of {ENQUEUE_BATCH:,}, drained by `errands worker -p 1 -c {CONCURRENCY} --burst`; "
            f"range over {opts.reps} repetition(s); load average at the end {load}."
            + (f" Schema variant: `{opts.schema_sql}`." if opts.schema_sql else "") + " (idle x): what the same "
            "server-wide counter did per job-time while this database was idle just before (other clients).")
    md = head + "\n\n" + tbl + "\n" + wal_tables(results, opts.jobs)
    report = {"started": started.isoformat(timespec="seconds"), "jobs": opts.jobs, "reps": opts.reps,
              "load_average": load, "results": results, "table": tbl}
    common.save_results("costs-" + started.strftime("%Y%m%dT%H%M%SZ"), report, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
