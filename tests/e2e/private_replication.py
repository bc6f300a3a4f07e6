"""A private PostgreSQL primary with a streaming hot standby, for the failover and replica tests.

The shared server on 127.0.0.1:5432 must never be reconfigured or killed, so the tests that kill a
primary start their own pair, both children of the test process (``die_with_parent``) on spare ports
of 127.0.0.1, each in its own temporary directory owned by the ``postgres`` OS user when run as root:

- the **primary**: ``initdb`` (local ``trust`` for the superuser ``postgres``, ``scram-sha-256`` over
  TCP), ``wal_level=replica``, ``max_wal_senders``, a physical replication slot ``standby1``, the
  role ``errands`` / ``s3cret`` and the database ``errands_e2e`` it owns;
- the **standby**: ``pg_basebackup -X stream -R`` from the primary (over the primary's Unix socket),
  then started with ``hot_standby=on``, ``primary_conninfo`` naming it ``application_name=standby1``
  and ``primary_slot_name=standby1``.  Role and database arrive by replication, like every row later.

``synchronous=True`` sets ``synchronous_standby_names = 'standby1'`` on the primary once the standby
streams (``ALTER SYSTEM`` and a reload): a commit then returns only once the standby has flushed its
WAL (``synchronous_commit=on``).  The setting lives in the primary's ``postgresql.auto.conf`` only,
written after the base backup, so the standby does not inherit it: promoted, it does not wait for a
standby of its own that does not exist.

Both servers run with ``fsync=off``.  That would lose data if the *operating system* crashed; the
tests kill the postgres *process* (``kill_primary``: SIGQUIT, PostgreSQL's "immediate shutdown", or
SIGKILL), after which everything the primary had written is still in the OS page cache and on disk
as far as any later reader can tell.  So fsync changes nothing in what a failover test measures: what
matters is what had been *sent to and replayed by* the standby when the primary died, and with an
asynchronous standby that is all a failover keeps.

Binaries not installed: skipped with a message, except under CI=true (a failure).

Use ``start_pair(synchronous=...)`` or, in a fixture body, ``yield from replicated_pair(...)``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from helpers import scaled
from private_postgres import ScratchPostgres, require_postgres_bindir
from private_servers import DATABASE, PASSWORD, USER, _port_is_free, start_on_a_free_port

STANDBY_NAME = "standby1"
"""The standby's ``application_name`` (as ``pg_stat_replication`` and ``synchronous_standby_names`` see it)
and the name of its replication slot on the primary."""

REPLICATION_SETTINGS = {
    "wal_level": "replica",
    "max_wal_senders": "5",
    "max_replication_slots": "5",
    "hot_standby": "on",
    "wal_keep_size": "64MB",
    "wal_sender_timeout": "10s",
    "wal_receiver_status_interval": "1s",  # the standby's replay position reaches pg_stat_replication soon
    "wal_retrieve_retry_interval": "200ms",  # a standby whose primary is gone promotes without a 5 s wait
}


class PairServer(ScratchPostgres):
    """One server of the pair: trust on the Unix socket, a password over TCP, replication settings."""

    def __init__(self, bindir: Path, **settings: str) -> None:
        super().__init__(bindir, max_connections=100, **{**REPLICATION_SETTINGS, **settings})

    def initialise(self) -> None:
        done = subprocess.run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                               "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
                               "--locale=C", "--no-sync"],
                              cwd=self.dir, capture_output=True, text=True, timeout=scaled(120), **self.run_as)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    @property
    def app_url(self) -> str:
        """The application's URL to this server alone: TCP, user ``errands`` with its password."""
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"

    def scalar(self, sql: str, database: str = "postgres") -> Any:
        with self.connect(database) as conn:
            row = conn.execute(sql).fetchone()
            return None if row is None else row[0]

    def in_recovery(self) -> bool:
        return bool(self.scalar("SELECT pg_is_in_recovery()"))


class StandbyServer(PairServer):
    """A hot standby made by ``pg_basebackup -X stream -R`` from ``primary``."""

    def __init__(self, bindir: Path, primary: PairServer) -> None:
        self.primary = primary
        conninfo = f"host={primary.dir} port={primary.port} user=postgres application_name={STANDBY_NAME}"
        super().__init__(bindir, primary_conninfo=conninfo, primary_slot_name=STANDBY_NAME)

    def initialise(self) -> None:
        done = subprocess.run([str(self.bindir / "pg_basebackup"), "-h", str(self.primary.dir),
                               "-p", str(self.primary.port), "-U", "postgres", "-D", str(self.data),
                               "-X", "stream", "-R", "--no-sync", "-c", "fast"],
                              cwd=self.dir, capture_output=True, text=True, timeout=scaled(120), **self.run_as)
        if done.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")



class ReplicatedPair:
    """A primary and its streaming hot standby; see the module docstring."""

    def __init__(self, primary: PairServer, standby: StandbyServer, *, synchronous: bool) -> None:
        self.primary = primary
        self.standby = standby
        self.synchronous = synchronous
        self.database = DATABASE
        self._paused_receiver: int | None = None

    # ------------------------------------------------------------------ URLs
    @property
    def primary_url(self) -> str:
        return self.primary.app_url

    @property
    def standby_url(self) -> str:
        return self.standby.app_url

    @property
    def failover_url(self) -> str:
        """libpq's multi-host URL: the first of the two hosts that accepts writes."""
        return (f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
                f"/{DATABASE}?target_session_attrs=read-write")

    # ------------------------------------------------------------------ replication state
    def streaming(self) -> bool:
        """The primary sees the standby streaming."""
        return bool(self.primary.scalar(
            f"SELECT count(*) FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}' "
            "AND state = 'streaming'"))

    def replay_lag_bytes(self) -> int:
        """WAL the primary has written that the standby has not replayed yet, as the primary sees it."""
        lag = self.primary.scalar(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) FROM pg_stat_replication "
            f"WHERE application_name = '{STANDBY_NAME}'")
        if lag is None:
            raise RuntimeError("the standby is not connected to the primary")
        return int(lag)

    def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Return once the standby has replayed everything the primary had written when called."""
        target = str(self.primary.scalar("SELECT pg_current_wal_lsn()"))
        deadline = time.monotonic() + scaled(timeout)
        while True:
            behind = self.standby.scalar(f"SELECT pg_wal_lsn_diff('{target}', pg_last_wal_replay_lsn())")
            if behind is not None and int(behind) <= 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the standby is still {behind} bytes behind {target} after {timeout:g}s")
            time.sleep(0.02)

    def pause_streaming(self) -> int:
        """Freeze the standby's WAL receiver (SIGSTOP): from now on the standby falls behind, as one
        behind a slow or congested link does.  Returns the position the standby had received up to
        (``pg_last_wal_receive_lsn()`` in bytes from 0/0), for reports.  Do not call on a synchronous
        pair: every commit on the primary would wait for the frozen standby."""
        pid = self.standby.scalar("SELECT pid FROM pg_stat_wal_receiver")
        if pid is None:
            raise RuntimeError("the standby has no WAL receiver")
        self._paused_receiver = int(pid)
        os.kill(self._paused_receiver, signal.SIGSTOP)
        return int(self.standby.scalar("SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0')"))

    def resume_streaming(self) -> None:
        """Let a frozen WAL receiver run again (it then streams, or finds the primary gone)."""
        pid, self._paused_receiver = self._paused_receiver, None
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    # ------------------------------------------------------------------ failover
    def kill_primary(self, signum: signal.Signals = signal.SIGQUIT) -> None:
        """Kill the primary's postmaster (SIGQUIT: immediate shutdown, no checkpoint; or SIGKILL) and wait
        until it has exited.  Nothing is flushed or handed over: the standby keeps what it had received."""
        process = self.primary.process
        assert process is not None and process.poll() is None, "the primary is not running"
        process.send_signal(signum)
        process.wait(scaled(30))
        if signum == signal.SIGKILL:  # its backends outlive a killed postmaster until they notice
            self._wait_port_closed(self.primary.port)

    @staticmethod
    def _wait_port_closed(port: int) -> None:
        deadline = time.monotonic() + scaled(30)
        while not _port_is_free(port) and time.monotonic() < deadline:
            time.sleep(0.02)

    def promote(self) -> float:
        """Take the standby out of recovery; returns the seconds until it accepted a write."""
        began = time.monotonic()
        with self.standby.connect() as conn:
            conn.execute("SELECT pg_promote(wait => true, wait_seconds => %s)", (max(1, round(scaled(60))),))
        deadline = began + scaled(60)
        while True:
            try:
                with self.standby.connect() as conn:
                    conn.execute("CREATE TEMPORARY TABLE promoted_probe (x int)")
                return time.monotonic() - began
            except Exception:  # still read-only
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def destroy(self) -> None:
        self.resume_streaming()  # a stopped process would not hear the shutdown
        try:
            self.standby.destroy()
        finally:
            self.primary.destroy()

    def __repr__(self) -> str:
        mode = "synchronous" if self.synchronous else "asynchronous"
        return f"<{mode} pair: primary {self.primary.port}, standby {self.standby.port}>"


def _create_app_database(primary: PairServer) -> None:
    with primary.connect() as conn:
        conn.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"CREATE DATABASE {DATABASE} OWNER {USER}")
        conn.execute(f"SELECT pg_create_physical_replication_slot('{STANDBY_NAME}')")


def _make_synchronous(primary: PairServer) -> None:
    with primary.connect() as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        conn.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + scaled(30)
    while primary.scalar(f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'") \
            != "sync":
        if time.monotonic() > deadline:
            raise RuntimeError("the standby did not become synchronous")
        time.sleep(0.02)


def start_pair(*, synchronous: bool) -> ReplicatedPair:
    """Initialise and start a primary and a streaming standby; skip (or fail in CI) without PostgreSQL."""
    bindir = require_postgres_bindir()
    primary = PairServer(bindir)
    standby: StandbyServer | None = None
    try:
        primary.initialise()
        start_on_a_free_port(primary)
        _create_app_database(primary)
        standby = StandbyServer(bindir, primary)
        standby.initialise()
        start_on_a_free_port(standby)
        pair = ReplicatedPair(primary, standby, synchronous=synchronous)
        deadline = time.monotonic() + scaled(30)
        while not pair.streaming():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby does not stream:\n{standby.log_tail()}")
            time.sleep(0.02)
        if synchronous:
            _make_synchronous(primary)
        pair.wait_caught_up()
        return pair
    except BaseException:
        if standby is not None:
            standby.destroy()
        primary.destroy()
        raise


def replicated_pair(*, synchronous: bool) -> Iterator[ReplicatedPair]:
    """The body of a fixture: a started pair, both servers stopped and removed afterwards."""
    pair = start_pair(synchronous=synchronous)
    try:
        yield pair
    finally:
        pair.destroy()
