"""A private 3-node MariaDB Galera Cluster that a test may kill, restart and cut off at will.

Like tests/e2e/private_servers.py, but three ``mariadbd`` processes on 127.0.0.1, each in its own
temporary directory with its own ports (SQL, group communication, IST, SST), all children of the
test process and told by the kernel to die with it.  Node 1 is initialised with
``mariadb-install-db`` and bootstraps the cluster (``--wsrep-new-cluster``); nodes 2 and 3 start
with an empty data directory and receive a full copy from a donor (rsync SST).  A node killed and
started again rejoins by IST (its last position recovered first with ``--wsrep-recover``, as
systemd's ``galera_recovery`` does; the donor's gcache still holds what it missed) or by SST.

The nodes run as the ``mysql`` OS user when the test runs as root (Galera's SST scripts and rsync
daemon run as the server's user, and the data directories must be theirs), as the test's own user
otherwise; every option is on the command line (``--no-defaults``): nothing of the machine's
my.cnf or of the shared server on 3306 is read or touched.

``isolate()`` cuts a node off from the cluster with Galera's ``gmcast.isolate=1`` provider option:
the node closes its group-communication links and refuses new ones, drops to a non-Primary
component of one, and keeps accepting client connections, where it refuses statements on tables
with 1047 (``WSREP has not yet prepared node for application use``) - exactly what a node on the
wrong side of a network partition does.  ``rejoin()`` sets it back to 0: the node reconnects,
catches up by IST and is Synced again.

galera-4, rsync or MariaDB not installed: the tests are skipped with a message, except under
``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from helpers import scaled
from private_servers import DATABASE, PASSWORD, USER, _unavailable, die_with_parent, mariadb_binaries, spare_port

NODES = 3
#: A node that joins by SST waits for the donor's copy, and a second joiner for the first to finish.
START_TIMEOUT = scaled(120.0)
STOP_TIMEOUT = scaled(60.0)
SYNC_TIMEOUT = scaled(60.0)
PROVIDER_PATHS = ("/usr/lib/galera/libgalera_smm.so", "/usr/lib/galera-4/libgalera_smm.so",
                  "/usr/lib64/galera-4/libgalera_smm.so", "/usr/lib64/galera/libgalera_smm.so",
                  "/usr/lib/x86_64-linux-gnu/galera/libgalera_smm.so", "/usr/lib/libgalera_smm.so",
                  "/usr/local/lib/libgalera_smm.so")


def galera_provider() -> str | None:
    """The path of ``libgalera_smm.so`` (``$WSREP_PROVIDER`` first), or None when galera-4 is not installed."""
    candidates = [os.environ.get("WSREP_PROVIDER", ""), *PROVIDER_PATHS]
    return next((path for path in candidates if path and Path(path).is_file()), None)


def _search_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin", "/bin"])


def _missing() -> str | None:
    """Why a private cluster cannot run here, or None."""
    if mariadb_binaries() is None:
        return "MariaDB server binaries not found (mariadb-install-db and mariadbd); install mariadb-server"
    if galera_provider() is None:
        return ("the Galera provider libgalera_smm.so was not found (looked in $WSREP_PROVIDER and "
                f"{', '.join(PROVIDER_PATHS)}); install galera-4")
    if shutil.which("rsync", path=_search_path()) is None:
        return "rsync not found: the nodes join the private Galera cluster by rsync SST; install rsync"
    if shutil.which("wsrep_sst_rsync", path=_search_path()) is None:
        return "MariaDB's SST script wsrep_sst_rsync not found; install mariadb-server (10.4 or later)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("mysql")
        except KeyError:
            return "running as root, the private Galera nodes need an OS user named 'mysql'"
    return None


class GaleraNode:
    """One ``mariadbd`` of the cluster: its ports, its directory, its process."""

    def __init__(self, index: int, cluster: GaleraCluster) -> None:
        self.index = index
        self.name = f"node{index}"
        self.cluster = cluster
        self.port = spare_port()
        self.gcomm_port = spare_port()
        self.ist_port = spare_port()
        self.sst_port = spare_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"errands-galera{index}-"))
        self.data = self.dir / "data"
        self.data.mkdir()
        self.log_path = self.dir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.run_as: dict[str, Any] = {}
        if os.geteuid() == 0:  # the node, its SST script and rsync daemon run as `mysql` and own the files
            account = pwd.getpwnam("mysql")
            for path in (self.dir, self.data):
                os.chown(path, account.pw_uid, account.pw_gid)
            self.run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": [],
                           "env": {"PATH": _search_path(), "HOME": str(self.dir), "LC_ALL": "C"}}

    # ------------------------------------------------------------------ configuration
    def base_options(self) -> list[str]:
        """The files, InnoDB kept small, and the settings Galera needs (row events, interleaved auto-increments)."""
        options = [f"--datadir={self.data}", f"--tmpdir={self.dir}", "--innodb-buffer-pool-size=32M",
                   "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2", "--skip-name-resolve",
                   "--binlog-format=ROW", "--innodb-autoinc-lock-mode=2", "--default-storage-engine=InnoDB"]
        return options + (["--user=mysql"] if os.geteuid() == 0 else [])

    def options(self) -> list[str]:
        """The server's whole configuration (``--no-defaults``): the base options, wsrep on."""
        provider_options = ";".join([f"gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm_port}",
                                     f"ist.recv_addr=127.0.0.1:{self.ist_port}",
                                     "gcache.size=64M", "gcache.page_size=16M"])
        return self.base_options() + [
            "--wsrep-on=ON", f"--wsrep-provider={self.cluster.provider}",
            f"--wsrep-cluster-address={self.cluster.gcomm_address()}", "--wsrep-cluster-name=errands_e2e",
            f"--wsrep-provider-options={provider_options}", f"--wsrep-node-name={self.name}",
            f"--wsrep-node-address=127.0.0.1:{self.gcomm_port}",
            f"--wsrep-node-incoming-address=127.0.0.1:{self.port}",
            "--wsrep-sst-method=rsync", f"--wsrep-sst-receive-address=127.0.0.1:{self.sst_port}"]

    def command(self, *, bootstrap: bool = False, position: str | None = None) -> list[str]:
        return [self.cluster.server, "--no-defaults", *self.options(), f"--port={self.port}",
                "--bind-address=127.0.0.1", f"--socket={self.dir / 'mysqld.sock'}",
                f"--pid-file={self.dir / 'mariadbd.pid'}", f"--log-error={self.log_path}", "--max-connections=200",
                *(["--wsrep-new-cluster"] if bootstrap else []),
                *([f"--wsrep-start-position={position}"] if position else [])]

    def recovered_position(self) -> str | None:
        """The position InnoDB last committed (``uuid:seqno``), after a crash left ``grastate.dat`` at
        seqno -1: what ``galera_recovery`` (systemd) and ``mysqld_safe`` find with ``--wsrep-recover``
        before they start a node, so that it asks the cluster for the missing writes only (IST)
        instead of a whole copy (SST).  None when the node was shut down cleanly or never ran."""
        try:
            state = (self.data / "grastate.dat").read_text()
        except OSError:
            return None
        if not re.search(r"^seqno:\s+-1\s*$", state, re.M):
            return None
        log = self.dir / "recover.log"
        subprocess.run([self.cluster.server, "--no-defaults", *self.options(), f"--log-error={log}",
                        "--wsrep-recover", "--skip-networking", f"--socket={self.dir / 'recover.sock'}"],
                       cwd=self.dir, capture_output=True, timeout=scaled(120), **self.run_as)
        found = re.findall(r"WSREP: Recovered position: (\S+:-?\d+)", log.read_text(errors="replace"))
        return found[-1] if found and not found[-1].endswith(":-1") else None

    def initialise(self) -> None:
        """The system tables, for the node that bootstraps (the others receive them by SST)."""
        done = subprocess.run([self.cluster.install_db, "--no-defaults", *self.base_options(),
                               "--auth-root-authentication-method=normal", "--skip-test-db"],
                              cwd=self.dir, capture_output=True, text=True, timeout=scaled(120))
        if done.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    # ------------------------------------------------------------------ access
    @property
    def url(self) -> str:
        """The application's URL for this node alone: TCP, user ``errands`` with its password."""
        return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"

    def admin_connect(self) -> Any:
        """A PyMySQL connection as root (autocommit), not through errands."""
        import pymysql

        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", autocommit=True,
                               connect_timeout=2, read_timeout=10, write_timeout=10)

    def status(self, name: str) -> str | None:
        """A status variable (``wsrep_cluster_size``, ``wsrep_local_cert_failures``...), None when unset."""
        return self.statuses(name).get(name)

    def statuses(self, *names: str) -> dict[str, str]:
        conn = self.admin_connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN (" + ", ".join(["%s"] * len(names)) + ")",
                            names)
                return {str(name): str(value) for name, value in cur.fetchall()}
        finally:
            conn.close()

    def state(self) -> tuple[str, str, int]:
        """(``wsrep_local_state_comment``, ``wsrep_cluster_status``, ``wsrep_cluster_size``); empty while down."""
        try:
            found = self.statuses("wsrep_local_state_comment", "wsrep_cluster_status", "wsrep_cluster_size")
        except Exception:  # not up, or refusing: PyMySQL's errors and OSError alike
            return ("", "", 0)
        return (found.get("wsrep_local_state_comment", ""), found.get("wsrep_cluster_status", ""),
                int(found.get("wsrep_cluster_size", "0") or 0))

    # ------------------------------------------------------------------ life cycle
    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def launch(self, *, bootstrap: bool = False, position: str | None = None) -> None:
        """Start the process and return at once (``wait_for_state`` waits for it)."""
        assert not self.running, f"{self.name} is already running"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(bootstrap=bootstrap, position=position),
                                            stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
                                            preexec_fn=die_with_parent(signal.SIGKILL, own_group=True),
                                            **self.run_as)

    def wait_for_state(self, wanted: tuple[str, str, int], timeout: float, what: str) -> None:
        """Poll the node's wsrep state until it is ``wanted``; fail with the log when it exits or times out."""
        deadline = time.monotonic() + timeout
        while (state := self.state()) != wanted:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"galera {self.name} exited with code {self.process.returncode} waiting "
                                   f"to be {what}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"galera {self.name} was not {what} within {timeout:.0f}s (state {state}):\n"
                                   f"{self.log_tail()}")
            time.sleep(0.1)

    def start(self) -> float:
        """Start again after ``kill()``, as a service manager would (the position recovered first): the
        node rejoins the others by IST, or SST when their gcache no longer holds what it missed;
        returns the seconds until Synced."""
        began = time.monotonic()
        self.launch(position=self.recovered_position())
        self.wait_for_state(("Synced", "Primary", self.cluster.running_count()), START_TIMEOUT, "Synced again")
        return time.monotonic() - began

    def kill(self) -> None:
        """SIGKILL: the node dies as on a power cut; the others notice and go on without it."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        self.process = None

    def stop(self) -> float:
        """Clean shutdown (SIGTERM), waiting until the process is gone; returns the seconds it took."""
        began = time.monotonic()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
                raise RuntimeError(f"galera {self.name} ignored SIGTERM for {STOP_TIMEOUT:.0f}s and was "
                                   f"killed:\n{self.log_tail()}") from None
        self.process = None
        return time.monotonic() - began

    def isolate(self) -> float:
        """Cut the node off from the cluster; it still accepts connections but refuses statements (1047).

        Returns the seconds until the node and the others saw it (node non-Primary, the rest a Primary
        component without it)."""
        began = time.monotonic()
        self._provider_option("gmcast.isolate=1")
        self.wait_for_state(("Initialized", "non-Primary", 1), SYNC_TIMEOUT, "cut off (non-Primary)")
        for other in self.cluster.nodes:
            if other is not self and other.running:
                other.wait_for_state(("Synced", "Primary", self.cluster.running_count() - 1), SYNC_TIMEOUT,
                                     f"Primary without {self.name}")
        return time.monotonic() - began

    def rejoin(self) -> float:
        """Undo ``isolate()``: the node reconnects and catches up; returns the seconds until Synced."""
        began = time.monotonic()
        self._provider_option("gmcast.isolate=0")
        self.wait_for_state(("Synced", "Primary", self.cluster.running_count()), SYNC_TIMEOUT, "Synced again")
        return time.monotonic() - began

    def _provider_option(self, option: str) -> None:
        conn = self.admin_connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SET GLOBAL wsrep_provider_options = '{option}'")
        finally:
            conn.close()

    def destroy(self) -> None:
        """Kill and delete every file; safe to call more than once (the data are thrown away anyway)."""
        try:
            self.kill()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def __repr__(self) -> str:
        return f"<galera {self.name} on 127.0.0.1:{self.port} (gcomm {self.gcomm_port}) in {self.dir}>"


class GaleraCluster:
    """Three nodes on 127.0.0.1; ``start()`` bootstraps node 1 and lets the others join by SST."""

    def __init__(self, install_db: str, server: str, provider: str) -> None:
        self.install_db = install_db
        self.server = server
        self.provider = provider
        self.nodes: list[GaleraNode] = []
        self.nodes = [GaleraNode(i, self) for i in range(1, NODES + 1)]
        self.start_seconds = 0.0

    def gcomm_address(self) -> str:
        return "gcomm://" + ",".join(f"127.0.0.1:{node.gcomm_port}" for node in self.nodes)

    def running_count(self) -> int:
        return sum(1 for node in self.nodes if node.running)

    def url_all(self) -> str:
        """One multi-host URL naming every node, in order."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"mysql://{USER}:{PASSWORD}@{hosts}/{DATABASE}"

    def start(self) -> float:
        """Bootstrap, join the others, create the database and its user; returns the seconds it all took."""
        began = time.monotonic()
        first, *others = self.nodes
        first.initialise()
        first.launch(bootstrap=True)
        first.wait_for_state(("Synced", "Primary", 1), START_TIMEOUT, "bootstrapped")
        for node in others:  # both at once: the second waits for a donor if need be
            node.launch()
        for node in self.nodes:
            node.wait_for_state(("Synced", "Primary", NODES), START_TIMEOUT, f"Synced in a cluster of {NODES}")
        self._create_database()
        self.start_seconds = time.monotonic() - began
        return self.start_seconds

    def heal(self) -> None:
        """Every node running and Synced again, whatever an earlier test left (a node killed or cut off)."""
        for node in self.nodes:
            if not node.running:
                node.start()
        for node in self.nodes:
            if node.state() != ("Synced", "Primary", NODES):
                node.rejoin()

    def _create_database(self) -> None:
        conn = self.nodes[0].admin_connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE {DATABASE}")
                cur.execute(f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'")
                cur.execute(f"GRANT ALL PRIVILEGES ON {DATABASE}.* TO '{USER}'@'127.0.0.1'")
        finally:
            conn.close()

    def destroy(self) -> None:
        for node in self.nodes:
            node.destroy()

    def __repr__(self) -> str:
        return f"<galera cluster {self.nodes}>"


def galera_cluster() -> Iterator[GaleraCluster]:
    """A started 3-node cluster for a module-scoped fixture (``yield from galera_cluster()``), removed
    afterwards; skipped with a message (failed under CI=true) when galera-4, rsync or MariaDB is missing."""
    missing = _missing()
    if missing is not None:
        _unavailable(f"{missing}; the Galera tests need a private 3-node cluster")
    install_db, server = mariadb_binaries()  # type: ignore[misc]
    cluster = GaleraCluster(install_db, server, galera_provider())  # type: ignore[arg-type]
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
