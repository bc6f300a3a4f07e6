"""PostgreSQL failover under running workers: the primary killed mid-drain, the standby promoted.

A private primary with a streaming hot standby (tests/e2e/private_replication.py), three real
``errands worker`` supervisors (each one worker process, 4 runner threads) on libpq's multi-host URL
``postgresql://...@127.0.0.1:P1,127.0.0.1:P2/errands_e2e?target_session_attrs=read-write``, a few
thousand jobs and a producer thread that keeps enqueueing small batches (so that acknowledged
enqueues are in flight at the kill).  Once a fifth of the jobs ran, the primary is killed (SIGQUIT,
PostgreSQL's immediate shutdown: no checkpoint, clients cut off), the database stays down a moment,
then the standby is promoted.  Nobody restarts or reconfigures anything in errands: the workers'
dedicated connections, the shared pool and the LISTEN connection must find the new primary by
themselves, through the second host of the URL.

``sleep_then_note`` appends "job attempt pid" to a file on local disk, so every run is counted, also
a run whose result the database never recorded.

- **synchronous standby** (``synchronous_standby_names``): nothing acknowledged may be lost, so every
  enqueue the producer saw succeed runs, the table drains, the supervisors and their worker processes
  are the ones that started, and a job runs twice only if it was claimed at the kill.
- **a URL that may land on the standby** (``target_session_attrs=any``): the standby refuses writes and
  LISTEN (SQLSTATE 25006); workers must wait for the promotion as for a server that is down.
- **asynchronous standby**: what a failover loses is measured and printed (acknowledged enqueues that
  never ran, finished jobs that ran again); only what must hold is asserted.  Twice: as the standby
  is (a few milliseconds behind on one machine), and with the standby's WAL receiver frozen for the
  last moments before the kill, as a standby behind a congested link would be; the loss then must come
  from that window only (everything acknowledged before it survives).

Each failover consumes its pair (the promoted standby has no standby of its own), so each test starts
one (1.5 s); the doctor tests (``errands doctor``'s ``replication`` check: synchronous, asynchronous,
hidden, missing standby, pointed at the standby) share one pair for the module.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sample_jobs
from helpers import cli_env, scaled, wait_for
from private_replication import ReplicatedPair, replicated_pair
from private_servers import die_with_parent

from errands import Errands, StoreError
from errands.diagnostics import Check, Status, diagnose

pytestmark = pytest.mark.slow

JOBS = 3000
SUPERVISORS = 3
CONCURRENCY = 4
LEASE = 6.0
"""Short, so that a job whose finished state the failover lost comes back soon (async standby)."""
OUTAGE = 1.0
"""Seconds between the kill and the promotion: the workers meet a dead server first, as they would
while a failover manager decides (Patroni's ``ttl`` is 30 s by default; RDS takes 60 to 120 s)."""
PRODUCER_BATCH = 5
WORK = 0.002
"""Each job's sleep: with 12 runner threads on two cores, 3,000 jobs drain in a few seconds."""


def start_worker(url: str, log_path: Path, notes: Path) -> subprocess.Popen[str]:
    """``errands worker`` (supervisor and one worker process), killed by the kernel if pytest dies."""
    with open(log_path, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "errands", "worker", "-c", str(CONCURRENCY),
                                 "--lease", f"{LEASE:g}", "--shutdown-timeout", "10", "--no-scheduler"],
                                env=cli_env(url, ERRANDS_TEST_NOTES=str(notes)), stdout=out,
                                stderr=subprocess.STDOUT, text=True, preexec_fn=die_with_parent(signal.SIGKILL))


def noted(notes: Path) -> list[tuple[int, int, int]]:
    """(job id, attempt, worker pid) of every run so far, in the order they ended."""
    return [(int(job), int(attempt), int(pid))
            for job, attempt, pid in (line.split() for line in notes.read_text().splitlines())]


LAST_ERROR: list[str] = [""]


def jobs_left(app: Errands) -> int | None:
    """Rows in the jobs table; None while no server accepts writes on the URL."""
    try:
        return int(app.store.db.run(lambda cur: (cur.execute("SELECT COUNT(*) FROM errands_jobs"),
                                                 cur.fetchone()[0])[1]))
    except StoreError as exc:
        LAST_ERROR[0] = str(exc)
        return None


def promoted_jobs(pair: ReplicatedPair) -> int:
    return int(pair.standby.scalar("SELECT COUNT(*) FROM errands_jobs", pair.database))


def children(pid: int) -> set[int]:
    """The processes ``pid`` started (Linux: /proc/PID/task/*/children)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return found


def listeners(pair: ReplicatedPair) -> int:
    """Sessions on the (promoted) standby whose last statement was the worker's LISTEN."""
    return int(pair.standby.scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                    "AND query LIKE 'LISTEN %'", pair.database))


class AppBack(threading.Thread):
    """Reads through the application's store (this process's pool) until it answers; notes when."""

    def __init__(self, app: Errands) -> None:
        super().__init__(name="app-back", daemon=True)
        self.app = app
        self.at: float | None = None
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + scaled(30)
        while time.monotonic() < deadline:
            if jobs_left(self.app) is not None:
                self.at = time.monotonic()
                return
            time.sleep(0.01)


class Producer(threading.Thread):
    """Enqueues batches until told to stop or the database fails; remembers every acknowledged id,
    with the moment each batch was acknowledged."""

    def __init__(self, app: Errands) -> None:
        super().__init__(name="producer", daemon=True)
        self.app = app
        self.acknowledged: list[tuple[float, list[int]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                handles = self.app.enqueue_many([sample_jobs.sleep_then_note.prepare(WORK)
                                                 for _ in range(PRODUCER_BATCH)])
            except StoreError:
                return  # the kill: whatever was not acknowledged is not the caller's to count
            self.acknowledged.append((time.monotonic(), [h.id for h in handles]))
            time.sleep(0.01)

    def ids(self, before: float = float("inf")) -> set[int]:
        return {i for at, ids in self.acknowledged if at < before for i in ids}


@dataclass
class Failover:
    """What one failover run saw, for the assertions and the printed figures."""

    enqueued: set[int]
    acknowledged: set[int]
    runs: list[tuple[int, int, int]]
    runs_at_kill: int
    reserved_at_kill: int
    lag_at_kill: int
    pids_before: set[int]
    resumed_after: float
    drained_after: float
    app_after: float
    """Seconds from the promotion until the test process's own store (an application's) read again."""
    promote_took: float
    window: set[int] = field(default_factory=set)
    """Acknowledged while the standby's receiver was frozen (asynchronous run with a lag window)."""

    @property
    def ran(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for job, _, _ in self.runs:
            counts[job] = counts.get(job, 0) + 1
        return counts

    @property
    def twice(self) -> list[int]:
        return sorted(job for job, n in self.ran.items() if n > 1)

    @property
    def finished_then_ran_again(self) -> list[int]:
        """Jobs whose first run ended before the kill and that ran again after it."""
        before = {job for job, _, _ in self.runs[:self.runs_at_kill]}
        return [job for job in self.twice if job in before]

    @property
    def lost(self) -> list[int]:
        """Enqueued (in bulk or acknowledged to the producer) and never run."""
        return sorted((self.enqueued | self.acknowledged) - set(self.ran))

    def summary(self, label: str) -> str:
        return (f"\n{label}: {len(self.enqueued)} + {len(self.acknowledged)} acknowledged enqueues, "
                f"{self.runs_at_kill} runs before the kill, {self.reserved_at_kill} jobs claimed at the kill, "
                f"standby {self.lag_at_kill} bytes short at the kill; promotion {self.promote_took:.2f}s; "
                f"flowing again {self.resumed_after:.2f}s after it, drained {self.drained_after:.2f}s after it, "
                f"the application's store read again {self.app_after:.2f}s after it; "
                f"{len(self.twice)} ran twice ({len(self.finished_then_ran_again)} of them finished before the "
                f"kill), {len(self.lost)} lost" + (f" ({len(self.window)} acknowledged in the lag window)"
                                                    if self.window else ""))


@pytest.fixture
def app() -> Iterator[Errands]:
    app = sample_jobs.app
    previous = app.database_url
    try:
        yield app
    finally:
        app.store.close()
        app.use_database(previous)


class Fleet:
    """The supervisors of one scenario, their logs and the notes file every run writes to."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.notes = tmp_path / "runs.txt"
        self.notes.touch()
        self.logs = [tmp_path / f"worker{i}.log" for i in range(SUPERVISORS)]
        self.workers = [start_worker(url, log, self.notes) for log in self.logs]

    def runs(self) -> int:
        return len(self.notes.read_text().splitlines())

    def worker_pids(self) -> set[int] | None:
        """The supervisors' worker processes once each supervisor has one that ran a job, else None."""
        started = [children(w.pid) for w in self.workers]
        ran = {pid for _, _, pid in noted(self.notes)}
        return set().union(*started) if all(pids & ran for pids in started) else None

    def assert_alive(self, when: str) -> None:
        for worker, log in zip(self.workers, self.logs, strict=True):
            assert worker.poll() is None, f"a supervisor exited {when}:\n{log.read_text()[-3000:]}"

    def stop(self) -> None:
        """SIGTERM each supervisor; each must exit 0, and no log may show a crash or a traceback."""
        self.assert_alive("before the stop")
        for worker in self.workers:
            worker.send_signal(signal.SIGTERM)
        for worker, log in zip(self.workers, self.logs, strict=True):
            assert worker.wait(scaled(30)) == 0, log.read_text()[-3000:]
        for log in self.logs:
            text = log.read_text(errors="replace")
            assert "crashed" not in text and "died" not in text and "Traceback" not in text, text[-5000:]

    def kill(self) -> None:
        """After a failure: their worker processes die with them (PR_SET_PDEATHSIG)."""
        for worker in self.workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


@dataclass
class Kill:
    reserved: int
    lag: int
    runs: int
    window_from: float


def kill_primary(pair: ReplicatedPair, fleet: Fleet, lag_window: float) -> Kill:
    """Optionally freeze the standby for ``lag_window`` seconds, then kill the primary; what it left."""
    window_from = float("inf")
    if lag_window:
        pair.wait_caught_up()  # everything acknowledged so far is on the standby...
        window_from = time.monotonic()
        pair.pause_streaming()  # ...and nothing from now on reaches it
        time.sleep(lag_window)  # the window itself: the primary keeps acknowledging
    reserved = int(pair.primary.scalar("SELECT COUNT(*) FROM errands_jobs WHERE reserved_by IS NOT NULL",
                                       pair.database))
    written = pair.primary.scalar("SELECT pg_current_wal_lsn()")
    pair.kill_primary(signal.SIGQUIT)
    # What the standby never received of what the primary had written just before the kill.
    lag = max(0, int(pair.standby.scalar(f"SELECT pg_wal_lsn_diff('{written}', pg_last_wal_receive_lsn())")))
    return Kill(reserved, lag, fleet.runs(), window_from)


def promote_and_drain(app: Errands, pair: ReplicatedPair) -> dict[str, float]:
    """Promote the standby and time what follows.  The jobs are counted on the promoted server directly
    (a new superuser session each time), so that the figures are the workers' and not this process's."""
    promote_took = pair.promote()
    promoted = time.monotonic()
    app_back = AppBack(app)
    left = promoted_jobs(pair)
    wait_for(lambda: promoted_jobs(pair) <= left - 100, timeout=30, interval=0.01,
             message="100 more jobs to finish on the promoted standby")
    resumed_after = time.monotonic() - promoted
    wait_for(lambda: promoted_jobs(pair) == 0, timeout=60, interval=0.05,
             message="the jobs table to drain on the promoted standby")
    drained_after = time.monotonic() - promoted
    # The application's side: this process's store (its pool) reaches the new primary too.
    app_back.join(scaled(30))
    assert app_back.at is not None, f"the test's own store did not reach the promoted standby ({LAST_ERROR[0]})"
    # Each worker process LISTENs again, on the promoted server (idle workers wake on new jobs).
    wait_for(lambda: listeners(pair) == SUPERVISORS, timeout=30,
             message=f"{SUPERVISORS} LISTEN connections on the promoted standby")
    return {"promote_took": promote_took, "resumed_after": resumed_after, "drained_after": drained_after,
            "app_after": app_back.at - promoted}


def fail_over(app: Errands, pair: ReplicatedPair, tmp_path: Path, *, lag_window: float = 0.0,
              url: str | None = None) -> Failover:
    """The scenario of the module docstring; returns what it saw (asserting what any failover needs)."""
    url = url or pair.failover_url
    app.use_database(url)
    app.migrate()
    enqueued = {h.id for h in app.enqueue_many([sample_jobs.sleep_then_note.prepare(WORK) for _ in range(JOBS)])}
    pair.wait_caught_up()
    fleet = Fleet(url, tmp_path)
    producer = Producer(app)
    try:
        producer.start()
        # A tenth with a lag window (the drain goes on through it), else a fifth: work is left at the kill.
        done_first = JOBS // 10 if lag_window else JOBS // 5
        wait_for(lambda: fleet.runs() >= done_first, timeout=60, message=f"the workers to finish {done_first} jobs")
        pids_before = wait_for(fleet.worker_pids, timeout=30, message="every supervisor's worker process to run a job")
        kill = kill_primary(pair, fleet, lag_window)
        producer.stop.set()
        time.sleep(OUTAGE)  # the outage itself, whatever happens meanwhile
        pair.resume_streaming()
        fleet.assert_alive("on the kill")
        timings = promote_and_drain(app, pair)
        producer.join(scaled(10))
        pids_after = set().union(*(children(w.pid) for w in fleet.workers))
        fleet.stop()
    finally:
        producer.stop.set()
        fleet.kill()
    runs = noted(fleet.notes)
    # The same worker processes ran every job: none died and was replaced by its supervisor.
    assert pids_after == pids_before and {pid for _, _, pid in runs} <= pids_before, \
        f"worker processes before the kill {sorted(pids_before)}, after {sorted(pids_after)}"
    return Failover(enqueued=enqueued, acknowledged=producer.ids(), runs=runs, runs_at_kill=kill.runs,
                    reserved_at_kill=kill.reserved, lag_at_kill=kill.lag, pids_before=pids_before,
                    window=producer.ids() - producer.ids(before=kill.window_from), **timings)


def test_failover_to_a_synchronous_standby_loses_nothing(app: Errands, tmp_path: Path) -> None:
    for pair in replicated_pair(synchronous=True):
        seen = fail_over(app, pair, tmp_path)
        print(seen.summary("synchronous standby"))
        assert seen.acknowledged, "the producer enqueued nothing before the kill"
        assert not seen.lost, f"{len(seen.lost)} jobs never ran: {seen.lost[:20]}"
        assert not app.failed(limit=10)
        # A job runs twice only when its claim was in flight at the kill (running, or held by a worker).
        assert len(seen.twice) <= seen.reserved_at_kill, seen.twice


def test_failover_with_a_url_that_may_land_on_the_standby(app: Errands, tmp_path: Path) -> None:
    """``target_session_attrs=any`` (libpq's default): while the primary is down, connections reach the
    standby, which refuses every write and LISTEN with SQLSTATE 25006.  Workers wait for a writable
    server as for an unreachable one: nothing recorded as failed, no traceback, finished runs recorded
    once the standby is promoted."""
    for pair in replicated_pair(synchronous=True):
        seen = fail_over(app, pair, tmp_path, url=pair.failover_url.replace("read-write", "any"))
        print(seen.summary("synchronous standby, target_session_attrs=any"))
        assert not seen.lost, f"{len(seen.lost)} jobs never ran: {seen.lost[:20]}"
        assert not app.failed(limit=10)
        assert len(seen.twice) <= seen.reserved_at_kill, seen.twice


@pytest.mark.parametrize("lag_window", [pytest.param(0.0, id="as-it-streams"),
                                        pytest.param(0.5, id="standby-behind-by-0.5s")])
def test_failover_to_an_asynchronous_standby_loses_at_most_what_it_had_not_received(
        app: Errands, tmp_path: Path, lag_window: float) -> None:
    for pair in replicated_pair(synchronous=False):
        seen = fail_over(app, pair, tmp_path, lag_window=lag_window)
        print(seen.summary(f"asynchronous standby, lag window {lag_window:g}s"))
        if lag_window:
            assert seen.window, "the producer enqueued nothing while the standby was frozen"
            # What the standby had received before the window survived; only the window can be lost.
            assert set(seen.lost) <= seen.window, sorted(set(seen.lost) - seen.window)[:20]
            probe = sample_jobs.sleep_then_note.enqueue(WORK)
            reused = probe.id <= max(seen.acknowledged)
            print(f"a job enqueued after the promotion got id {probe.id} (highest acknowledged before the kill: "
                  f"{max(seen.acknowledged)}): ids {'are' if reused else 'are not'} handed out again")
        else:
            assert set(seen.lost) <= seen.acknowledged, "a job of the initial batch (replayed before the kill) was lost"


# ---------------------------------------------------------------------- doctor
@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicatedPair]:
    """One synchronous pair for the doctor tests (each puts back what it changes), migrated."""
    for started in replicated_pair(synchronous=True):
        migrated = Errands(started.primary_url)
        migrated.migrate()
        migrated.store.close()
        started.wait_caught_up()
        yield started


def replication_check(url: str) -> Check:
    app = Errands(url)
    try:
        found = diagnose(app).get("postgres_replication")
    finally:
        app.store.close()
    assert found is not None
    return found


def set_standby_names(pair: ReplicatedPair, names: str, expect: str | None) -> None:
    """Change synchronous_standby_names on the primary; wait until pg_stat_replication shows ``expect``."""
    with pair.primary.connect() as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        conn.execute("SELECT pg_reload_conf()")
    wait_for(lambda: pair.primary.scalar("SELECT sync_state FROM pg_stat_replication") == expect
             and pair.primary.scalar("SHOW synchronous_standby_names") == names, timeout=10,
             message=f"sync_state {expect} under synchronous_standby_names = '{names}'")


@pytest.fixture
def monitor(pair: ReplicatedPair) -> Iterator[None]:
    """The app's user may read the replication state (pg_monitor), for one test."""
    with pair.primary.connect() as conn:
        conn.execute("GRANT pg_monitor TO errands")
    try:
        yield
    finally:
        with pair.primary.connect() as conn:
            conn.execute("REVOKE pg_monitor FROM errands")


def test_doctor_on_a_primary_with_a_synchronous_standby(pair: ReplicatedPair, monitor: None) -> None:
    found = replication_check(pair.primary_url)
    assert found.status is Status.OK, found
    assert found.data["role"] == "primary" and found.data["synchronous_standby_names"] == "standby1"
    assert "1 synchronous" in found.detail and "loses no acknowledged write" in found.detail
    [standby] = found.data["standbys"]
    assert standby["application_name"] == "standby1" and standby["sync_state"] == "sync"
    assert standby["state"] == "streaming" and standby["lag_bytes"] is not None
    assert found.items[0].startswith("standby1 (127.0.0.1): sync, streaming, ") \
        or found.items[0].startswith("standby1: sync, streaming, "), found.items


def test_doctor_warns_when_the_only_standby_is_asynchronous(pair: ReplicatedPair, monitor: None) -> None:
    set_standby_names(pair, "", "async")
    try:
        found = replication_check(pair.primary_url)
    finally:
        set_standby_names(pair, "standby1", "sync")
    assert found.status is Status.WARN, found
    assert "none synchronous" in found.detail and "acknowledged" in found.detail and "run again" in found.detail
    assert "synchronous_standby_names" in (found.fix or "")
    assert found.data["standbys"][0]["sync_state"] == "async"


def test_doctor_fails_when_commits_wait_for_a_standby_that_is_not_there(pair: ReplicatedPair,
                                                                       monitor: None) -> None:
    set_standby_names(pair, "elsewhere", "async")  # the doctor only reads: nothing here waits
    try:
        found = replication_check(pair.primary_url)
    finally:
        set_standby_names(pair, "standby1", "sync")
    assert found.status is Status.FAIL, found
    assert "every enqueue and settle hangs" in found.detail


def test_doctor_without_the_right_to_read_replication_state(pair: ReplicatedPair) -> None:
    found = replication_check(pair.primary_url)
    assert found.status is Status.INFO, found
    assert "hidden from this user" in found.detail and "pg_monitor" in (found.fix or "")
    assert found.items == ("standby1: state hidden from this user",)


def test_doctor_pointed_at_the_standby(pair: ReplicatedPair, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "errands", "doctor"], env=cli_env(pair.standby_url),
                          capture_output=True, text=True, timeout=scaled(60))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout  # a warning: nothing is broken, the URL points elsewhere
    line = next(line for line in done.stdout.splitlines() if " replication " in line)
    assert "standby (in recovery, read-only)" in line and "cannot claim" in line, done.stdout
    found = replication_check(pair.standby_url)
    assert found.status is Status.WARN and found.data["role"] == "standby"
    assert "target_session_attrs=read-write" in (found.fix or "")
    # Through the failover URL the doctor, like every connection, lands on the primary.
    assert replication_check(pair.failover_url).data["role"] == "primary"
