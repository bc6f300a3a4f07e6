"""errands on a 3-node MariaDB Galera Cluster: every node a writer, a node killed, a node cut off.

One private cluster for the module (tests/e2e/private_galera.py: three ``mariadbd`` on 127.0.0.1,
rsync SST, about 10 s to start).  Real ``errands worker`` supervisors (CLI, one process of 4 runner
threads each) drain a few thousand ``sleep_then_note`` jobs; each supervisor notes every run of every
job in a file of its own ("job attempt pid" a line, see tests/apps/sample_jobs.py), so a job that
ran twice, and which supervisor ran it, is counted on local disk, not in the database under test.

- every node a writer (multi-primary): certification conflicts between nodes are absorbed, none
  exhausts the claim's retries, no job runs twice;
- a node killed (SIGKILL) mid-drain under workers on a multi-host URL: they move to another node,
  nothing is lost, the node started again rejoins;
- a node cut off from the cluster (it answers, but refuses statements with 1047/1180) under a worker
  connected to it alone: no traceback, no success in the dead letter, finished results recorded
  once the node is back, nothing run twice;
- a read right after a write on another node sees it with ``?wsrep_sync_wait=1``;
- ``errands doctor`` reports the node's Galera state, and an isolated node as non-Primary (not as
  missing tables).

Each test prints what it measured (drain time, duplicates, certification failures, resume times):
the figures docs/galera.md quotes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sample_jobs
from helpers import cli_env, run_cli, scaled, wait_for
from private_galera import GaleraCluster, galera_cluster
from private_servers import die_with_parent

from errands import Errands, JobState

pytestmark = pytest.mark.slow

JOBS = 3000
CONCURRENCY = 4
CERT_COUNTERS = ("wsrep_local_cert_failures", "wsrep_local_bf_aborts")
JOBS_LEFT = "SELECT COUNT(*) FROM errands_e2e.errands_jobs"


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    for started in galera_cluster():
        print(f"\ngalera: 3-node cluster started in {started.start_seconds:.1f}s")
        yield started


@pytest.fixture
def app(cluster: GaleraCluster) -> Iterator[Errands]:
    """sample_jobs.app (the workers' app) on node 1, with the schema and empty tables, every node Synced."""
    cluster.heal()
    app = sample_jobs.app
    previous = app.database_url
    app.use_database(cluster.nodes[0].url)
    app.migrate()
    for table in ("errands_jobs", "errands_failed_jobs", "errands_workers"):
        app.store.db.run(lambda cur, table=table: cur.execute(f"DELETE FROM {table}"))
    try:
        yield app
    finally:
        app.store.close()
        app.use_database(previous)


# ---------------------------------------------------------------------------------- workers and runs
@dataclass
class Supervisor:
    """One ``errands worker`` supervisor, its log and the file where its runs are noted."""

    url: str
    log_path: Path
    notes: Path
    process: subprocess.Popen[str] | None = None

    def start(self, *args: str) -> None:
        self.notes.touch()
        with open(self.log_path, "w") as out:  # killed by the kernel if pytest dies
            self.process = subprocess.Popen(
                [sys.executable, "-m", "errands", "worker", "-c", str(CONCURRENCY), "--shutdown-timeout", "10",
                 *args], env=cli_env(self.url, ERRANDS_TEST_NOTES=str(self.notes)), stdout=out,
                stderr=subprocess.STDOUT, text=True, preexec_fn=die_with_parent(signal.SIGKILL))

    def runs(self) -> list[tuple[int, int]]:
        """(job id, attempt) of every run so far."""
        return [(int(job), int(attempt)) for job, attempt, _ in
                (line.split() for line in self.notes.read_text().splitlines())]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(scaled(30))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the worker on {self.url} ignored SIGTERM:\n{self.log()[-3000:]}") from None


@dataclass
class Drain:
    """What a drain measured: runs per supervisor, seconds per phase, the cluster's conflict counters."""

    supervisors: list[Supervisor]
    expected: set[int]
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    conflicts: dict[str, int] = field(default_factory=dict)

    def runs(self) -> list[tuple[int, int]]:
        return [run for s in self.supervisors for run in s.runs()]

    def all_alive(self) -> bool:
        """True while every supervisor runs; fails the test at once when one has exited."""
        for supervisor in self.supervisors:
            assert supervisor.alive, f"the worker on {supervisor.url} exited:\n{supervisor.log()[-3000:]}"
        return True

    @property
    def duplicates(self) -> int:
        ran = [job for job, _ in self.runs()]
        return len(ran) - len(set(ran))

    def figures(self) -> str:
        parts = [", ".join(f"{k} {v:.2f}s" for k, v in self.timings.items()),
                 ", ".join(f"{k} {v}" for k, v in self.counts.items()), f"{self.duplicates} job(s) ran twice",
                 ", ".join(f"{k} {v}" for k, v in self.conflicts.items())]
        return "; ".join(part for part in parts if part)


def cluster_count(cluster: GaleraCluster, sql: str) -> int | None:
    """A COUNT(*) read on the first node that answers (as root, not through errands); None if none does."""
    for node in cluster.nodes:
        if not node.running:
            continue
        try:
            conn = node.admin_connect()
        except Exception:  # down or refusing: try the next node
            continue
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return int(cur.fetchone()[0])
        except Exception:  # a node cut off refuses (1047): try the next one
            continue
        finally:
            conn.close()
    return None


def conflict_counters(cluster: GaleraCluster) -> dict[tuple[int, str], int]:
    """Certification failures and brute-force aborts of each running node process, by (pid, name)."""
    found: dict[tuple[int, str], int] = {}
    for node in cluster.nodes:
        if node.running and node.process is not None:
            values = node.statuses(*CERT_COUNTERS)
            found.update({(node.process.pid, name): int(values.get(name, "0") or 0) for name in CERT_COUNTERS})
    return found


def conflicts_between(before: dict[tuple[int, str], int], after: dict[tuple[int, str], int]) -> dict[str, int]:
    """How much each counter grew, over the node processes that ran at both readings (a node killed
    and started again counts from zero: its counters are left out)."""
    return {name: sum(after[key] - before[key] for key in after.keys() & before.keys() if key[1] == name)
            for name in CERT_COUNTERS}


def drain(app: Errands, cluster: GaleraCluster, urls: list[str], tmp_path: Path,
          disrupt: Callable[[Drain], None] | None = None, *worker_args: str) -> Drain:
    """Enqueue JOBS short jobs, start a supervisor per URL, call ``disrupt`` once a tenth has run,
    wait until the jobs table is empty, and stop the supervisors (each must exit 0)."""
    jobs = app.enqueue_many([sample_jobs.sleep_then_note.prepare(0.001) for _ in range(JOBS)])
    run = Drain([Supervisor(url, tmp_path / f"worker{i}.log", tmp_path / f"runs{i}.txt")
                 for i, url in enumerate(urls, 1)], {h.id for h in jobs})
    before = conflict_counters(cluster)
    began = time.monotonic()
    try:
        for supervisor in run.supervisors:
            supervisor.start(*worker_args)
        if disrupt is not None:
            wait_for(lambda: run.all_alive() and len(run.runs()) >= JOBS // 10, timeout=60,
                     message=f"{JOBS // 10} jobs to run")
            disrupt(run)
        wait_for(lambda: run.all_alive() and cluster_count(cluster, JOBS_LEFT) == 0,
                 timeout=120, interval=0.2, message="the jobs table to empty")
        run.timings["drain"] = time.monotonic() - began
        for supervisor in run.supervisors:
            assert supervisor.alive, f"the worker on {supervisor.url} exited:\n{supervisor.log()[-3000:]}"
        for supervisor in run.supervisors:
            assert supervisor.stop() == 0, supervisor.log()[-3000:]
    finally:
        for supervisor in run.supervisors:  # failed above: their worker processes die with them
            if supervisor.alive:
                assert supervisor.process is not None
                supervisor.process.kill()
                supervisor.process.wait()
    run.conflicts = conflicts_between(before, conflict_counters(cluster))
    return run


def assert_nothing_lost(app: Errands, run: Drain) -> None:
    """Every job ran, none is in the dead letter, and no worker logged a traceback or a crash."""
    failed = app.failed(limit=JOBS)
    assert not failed, [(f.id, f.error_type, f.error_message[:200]) for f in failed[:10]]
    ran = {job for job, _ in run.runs()}
    assert ran == run.expected, \
        f"missing {sorted(run.expected - ran)[:20]}, unexpected {sorted(ran - run.expected)[:20]}"
    for supervisor in run.supervisors:
        log = supervisor.log()
        for word in ("Traceback", "SettleError", "crashed", "died"):
            assert word not in log, f"{word!r} in the log of the worker on {supervisor.url}:\n{log[-5000:]}"


# ---------------------------------------------------------------------------------- the tests
def test_workers_on_the_multi_host_url_share_one_writer_node(app: Errands, cluster: GaleraCluster,
                                                             tmp_path: Path) -> None:
    """One writer node: three supervisors on the multi-host URL all write on node 1 (the first that
    answers), as behind a proxy that sends every write to one node.  The baseline of the other drains."""
    run = drain(app, cluster, [cluster.url_all()] * 3, tmp_path)
    assert_nothing_lost(app, run)
    assert run.duplicates == 0, sorted(run.runs())[:20]
    print(f"\ngalera one writer node, {JOBS} jobs, 3 workers on the multi-host URL: {run.figures()}")


def test_a_worker_on_every_node_runs_each_job_once(app: Errands, cluster: GaleraCluster, tmp_path: Path) -> None:
    """Multi-primary: the nodes certify each other's claims; a conflict costs a retry, never a second run."""
    run = drain(app, cluster, [node.url for node in cluster.nodes], tmp_path)
    assert_nothing_lost(app, run)
    assert run.duplicates == 0, sorted(run.runs())[:20]
    for supervisor in run.supervisors:
        assert "the database refused a claim" not in supervisor.log(), supervisor.log()[-5000:]
    print(f"\ngalera multi-primary, {JOBS} jobs, a worker per node: {run.figures()}")


def test_a_node_killed_mid_drain_loses_nothing_and_rejoins(app: Errands, cluster: GaleraCluster,
                                                           tmp_path: Path) -> None:
    """Workers on the multi-host URL (node 1 first): node 1 dies, they carry on on another node."""
    victim = cluster.nodes[0]

    def kill(run: Drain) -> None:
        run.counts["runs before the kill"] = len(run.runs())
        victim.kill()
        began = time.monotonic()
        left = cluster_count(cluster, JOBS_LEFT)
        assert left is not None
        # Jobs flowing again: a hundred more settled (recorded) on the nodes that are left.
        wait_for(lambda: (cluster_count(cluster, JOBS_LEFT) or left) <= left - 100, timeout=90, interval=0.1,
                 message="jobs to be settled again after the kill")
        run.timings["resumed after"] = time.monotonic() - began

    run = drain(app, cluster, [cluster.url_all()] * 3, tmp_path, kill)
    rejoin = victim.start()
    assert victim.state() == ("Synced", "Primary", 3)
    assert_nothing_lost(app, run)
    retried = sorted((job, attempt) for job, attempt in run.runs() if attempt > 1)
    print(f"\ngalera node killed mid-drain, {JOBS} jobs, 3 workers on the multi-host URL: {run.figures()}; "
          f"{len(retried)} second attempts; the node rejoined in {rejoin:.1f}s")


def test_a_node_cut_off_keeps_finished_results(app: Errands, cluster: GaleraCluster, tmp_path: Path) -> None:
    """Node 3 isolated under the one worker, connected to node 3 alone: it waits, as for a database that
    is down, and records what it finished once the node is back."""
    cut_off = cluster.nodes[2]

    def isolate(run: Drain) -> None:
        began = time.monotonic()
        done = len(run.supervisors[0].runs())
        run.timings["isolate"] = cut_off.isolate()
        # The node stays cut off until its worker has met the refusal (1047) and run a few more
        # jobs that it cannot record yet.
        wait_for(lambda: "unavailable" in run.supervisors[0].log(), timeout=30,
                 message="the worker on the cut-off node to call it unavailable")
        run.counts["runs on node 3 while cut off"] = len(run.supervisors[0].runs()) - done
        run.timings["rejoin"] = cut_off.rejoin()
        run.timings["cut off"] = time.monotonic() - began
        back, left = time.monotonic(), cluster_count(cluster, JOBS_LEFT)
        assert left is not None
        # Jobs flowing again: a hundred more settled (recorded) once node 3 is back.
        wait_for(lambda: (cluster_count(cluster, JOBS_LEFT) or left) <= left - 100, timeout=60, interval=0.1,
                 message="the worker on node 3 to settle jobs again")
        run.timings["resumed after"] = time.monotonic() - back

    run = drain(app, cluster, [cut_off.url], tmp_path, isolate)
    assert_nothing_lost(app, run)
    # The jobs it had finished were recorded when node 3 came back, well within their lease: none ran again.
    assert run.duplicates == 0, sorted(run.runs())[:20]
    print(f"\ngalera node cut off mid-drain, {JOBS} jobs, the worker on it: {run.figures()}")


def test_a_read_on_another_node_sees_the_write_with_wsrep_sync_wait(app: Errands, cluster: GaleraCluster) -> None:
    """Enqueued on node 1, read at once on node 3: ``?wsrep_sync_wait=1`` waits for node 3 to apply it."""
    node3 = cluster.nodes[2].url
    synced, plain = Errands(node3 + "?wsrep_sync_wait=1"), Errands(node3)
    seen: list[JobState] = []
    stale = 0
    try:
        for i in range(300):
            handle = sample_jobs.take_any.enqueue(i)
            seen.append(synced.job_state(handle.id))
            stale += plain.job_state(sample_jobs.take_any.enqueue(i).id) is not JobState.READY
    finally:
        synced.close()
        plain.close()
    assert set(seen) == {JobState.READY}, {state: seen.count(state) for state in set(seen)}
    print(f"\ngalera read on node 3 right after an enqueue on node 1: 300/300 READY with wsrep_sync_wait=1, "
          f"{stale}/300 stale without")


def doctor(url: str) -> tuple[int, dict[str, Any], str]:
    done = run_cli(url, "doctor", "--json")
    try:
        report = json.loads(done.stdout)
    except ValueError:
        report = {}
    return done.returncode, report, done.stdout + done.stderr


def galera_check(report: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in report.get("checks", []) if "galera" in c["name"] or "wsrep" in c["name"]), None)


def test_doctor_reports_the_galera_state(app: Errands, cluster: GaleraCluster) -> None:
    code, report, output = doctor(cluster.nodes[1].url)
    check = galera_check(report)
    assert check is not None and check["status"] == "ok", output
    assert "Primary" in check["detail"] and "3" in check["detail"], check

    cut_off = cluster.nodes[2]
    cut_off.isolate()
    try:
        code, report, output = doctor(cut_off.url)
        status = run_cli(cut_off.url, "status")
    finally:
        cut_off.rejoin()
    for text in (output, status.stdout + status.stderr):
        assert "errands migrate" not in text and "do not exist" not in text, text
        assert "Traceback" not in text, text
    assert code != 78 and status.returncode != 78, (output, status.stdout, status.stderr)
    # Said by the galera check, or by the connectivity check when the connection itself is refused.
    failed = [c for c in report.get("checks", []) if c["status"] == "fail"]
    assert code == 1 and any("primary component" in c["detail"].lower() for c in failed), output
