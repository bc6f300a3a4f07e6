"""Private PostgreSQL and MariaDB servers that a test may stop and start at will.

The shared servers on 5432/3306 must never be restarted by a test, so the
outage tests run their own throw-away instance: a fresh data directory in a
temporary directory, a spare port on 127.0.0.1, a Unix socket inside the
temporary directory, and one database (``errands_e2e``) owned by a user with a
password (``errands`` / ``s3cret``), so that error messages can be checked for
password masking.

The server process is a child of the test process (``postgres`` / ``mariadbd``
run directly, not through ``pg_ctl`` or a service manager), so ``stop()`` can
wait for it to exit and ``start()`` brings it back on the same port and data
directory.  Each child is told by the kernel to shut down if the test process
dies (``PR_SET_PDEATHSIG``), and the fixture stops it and deletes the directory
on teardown, also when the test failed.

Binaries not installed: the tests are skipped with a message, except under
``CI=true``, where that is a failure.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import scaled

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
DATABASE = "errands_e2e"
USER = "errands"
PASSWORD = "s3cret"
START_TIMEOUT = scaled(60.0)
STOP_TIMEOUT = scaled(60.0)

_PR_SET_PDEATHSIG = 1
try:  # loaded before any fork: the pre-exec hook must not import or allocate
    _LIBC: Any = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None


def _unavailable(message: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true makes the database-outage tests mandatory: {message}", pytrace=False)
    pytest.skip(message)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def spare_port() -> int:
    """A free TCP port below the kernel's ephemeral range when possible.

    The server is restarted on the same port, and while it is down any outgoing connection on the
    machine (the worker's own reconnects included) may be given an ephemeral port as its source
    port; a port from below that range cannot be taken that way.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    if low > 20000:
        for _ in range(50):
            port = random.randrange(15000, low)
            if _port_is_free(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # the kernel's pick
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent(signum: int, *, own_group: bool = False) -> Any:
    """A ``preexec_fn``: the kernel sends ``signum`` to the child when the test process dies."""

    def hook() -> None:
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if own_group:
            os.setpgrp()

    return hook


class PrivateServer:
    """One server instance in its own temporary directory; subclasses know the product."""

    kind = ""
    #: Signal that asks the server for a clean, fast shutdown.
    stop_signal = signal.SIGTERM
    #: Signal the kernel sends the server if the test process dies.
    orphan_signal = signal.SIGTERM

    def __init__(self) -> None:
        self.port = spare_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"errands-{self.kind}-"))
        self.data = self.dir / "data"
        self.log_path = self.dir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.run_as: dict[str, Any] = {}

    # ------------------------------------------------------------------ product specific
    def command(self) -> list[str]:
        raise NotImplementedError

    def admin_connect(self) -> Any:
        """A DB-API connection as the superuser (autocommit), not through errands."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """The application's URL: TCP, user ``errands`` with its password."""
        raise NotImplementedError

    # ------------------------------------------------------------------ life cycle
    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> float:
        """Start the server on its port and data directory; returns seconds until it accepted a login."""
        assert not self.running, f"{self.kind} is already running"
        began = time.monotonic()
        with open(self.log_path, "ab") as log:
            # Its own process group: a Ctrl-C in the terminal reaches pytest, which stops the server.
            self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.dir,
                                            preexec_fn=die_with_parent(self.orphan_signal, own_group=True),
                                            **self.run_as)
        deadline = began + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"private {self.kind} exited with code {self.process.returncode} while "
                                   f"starting:\n{self.log_tail()}")
            try:
                self.admin_connect().close()
                return time.monotonic() - began
            except Exception as exc:  # not up yet
                if time.monotonic() > deadline:
                    raise RuntimeError(f"private {self.kind} did not accept connections within "
                                       f"{START_TIMEOUT:.0f}s ({exc}):\n{self.log_tail()}") from exc
                time.sleep(0.05)

    def stop(self) -> float:
        """Clean shutdown, waiting until the process is gone; returns the seconds it took."""
        began = time.monotonic()
        process = self.process
        if process is None:
            return 0.0
        if process.poll() is None:
            process.send_signal(self.stop_signal)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise RuntimeError(f"private {self.kind} ignored {self.stop_signal.name} for "
                                   f"{STOP_TIMEOUT:.0f}s and was killed:\n{self.log_tail()}") from None
        self.process = None
        return time.monotonic() - began

    def destroy(self) -> None:
        """Stop (killing if need be) and delete every file; safe to call more than once."""
        try:
            if self.running:
                try:
                    self.stop()
                except RuntimeError:
                    pass
        finally:
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.process = None
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def __repr__(self) -> str:
        return f"<private {self.kind} on 127.0.0.1:{self.port} in {self.dir}>"


# ---------------------------------------------------------------------------------- PostgreSQL
def postgres_bindir() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin holding ``postgres`` and ``initdb``."""
    found: list[tuple[tuple[int, ...], Path]] = []
    for bindir in Path("/usr/lib/postgresql").glob("*/bin"):
        if (bindir / "postgres").is_file() and (bindir / "initdb").is_file():
            version = tuple(int(n) for n in re.findall(r"\d+", bindir.parent.name)) or (0,)
            found.append((version, bindir))
    if found:
        return max(found)[1]
    initdb = shutil.which("initdb")
    if initdb and (Path(initdb).parent / "postgres").is_file():
        return Path(initdb).parent
    return None


class PrivatePostgres(PrivateServer):
    kind = "postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown: roll back open transactions, disconnect clients
    orphan_signal = signal.SIGQUIT  # "immediate": the test process is gone, nobody will wait

    def __init__(self, bindir: Path) -> None:
        super().__init__()
        self.bindir = bindir
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root: the directory and the processes belong to `postgres`.
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root, PostgreSQL needs an OS user named 'postgres'") from None
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self.run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": [],
                           "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.dir),
                                   "LC_ALL": "C"}}

    def initialise(self) -> None:
        done = subprocess.run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                               "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
                               "--locale=C", "--no-sync"],
                              cwd=self.dir, capture_output=True, text=True, timeout=scaled(120), **self.run_as)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def command(self) -> list[str]:
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.dir),
            "fsync": "off",  # only an OS crash could lose data; the tests stop the server cleanly
            "max_connections": "100",
            "shared_buffers": "32MB",
            "logging_collector": "off",
        }
        return [str(self.bindir / "postgres"), "-D", str(self.data),
                *(arg for k, v in settings.items() for arg in ("-c", f"{k}={v}"))]

    def admin_connect(self) -> Any:
        import psycopg

        return psycopg.connect(host=str(self.dir), port=self.port, user="postgres", dbname="postgres",
                               autocommit=True, connect_timeout=2)

    def create_database(self) -> None:
        with self.admin_connect() as conn:
            conn.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
            conn.execute(f"CREATE DATABASE {DATABASE} OWNER {USER}")

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"


# ---------------------------------------------------------------------------------- MariaDB
def mariadb_binaries() -> tuple[str, str] | None:
    """(install-db script, server binary), or None when MariaDB is not installed."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/libexec", "/usr/local/sbin"])
    install = shutil.which("mariadb-install-db", path=path) or shutil.which("mysql_install_db", path=path)
    server = shutil.which("mariadbd", path=path)
    if install and server:
        return install, server
    return None


class PrivateMariaDB(PrivateServer):
    kind = "mariadb"
    stop_signal = signal.SIGTERM  # normal shutdown
    orphan_signal = signal.SIGTERM

    def __init__(self, install_db: str, server: str) -> None:
        super().__init__()
        self.install_db = install_db
        self.server = server
        self.socket = self.dir / "mysqld.sock"

    def _options(self) -> list[str]:
        options = [f"--datadir={self.data}", "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
                   "--innodb-flush-log-at-trx-commit=2", "--skip-name-resolve", f"--tmpdir={self.dir}"]
        if os.geteuid() == 0:
            options.append("--user=root")  # keeps the files ours, so the directory can be deleted
        return options

    def initialise(self) -> None:
        done = subprocess.run([self.install_db, "--no-defaults", *self._options(),
                               "--auth-root-authentication-method=normal", "--skip-test-db"],
                              cwd=self.dir, capture_output=True, text=True, timeout=scaled(120))
        if done.returncode != 0:
            raise RuntimeError(f"{self.install_db} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def command(self) -> list[str]:
        return [self.server, "--no-defaults", *self._options(), f"--port={self.port}",
                "--bind-address=127.0.0.1", f"--socket={self.socket}", f"--pid-file={self.dir / 'mariadbd.pid'}",
                f"--log-error={self.log_path}", "--max-connections=200"]

    def admin_connect(self) -> Any:
        import pymysql

        # Over TCP as root@127.0.0.1: PyMySQL leaks its socket when a Unix-socket connect is refused.
        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", autocommit=True,
                               connect_timeout=2)

    def create_database(self) -> None:
        conn = self.admin_connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE {DATABASE}")
                cur.execute(f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'")
                cur.execute(f"GRANT ALL PRIVILEGES ON {DATABASE}.* TO '{USER}'@'127.0.0.1'")
        finally:
            conn.close()

    @property
    def url(self) -> str:
        return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"


# ---------------------------------------------------------------------------------- fixture
def start_on_a_free_port(server: PrivateServer) -> None:
    """Start ``server``, picking another port if someone took its own since it was chosen."""
    for attempt in range(3):
        try:
            server.start()
            return
        except RuntimeError:
            if attempt == 2 or _port_is_free(server.port):
                raise
            server.port = spare_port()


def make_server(kind: str) -> PrivateServer:
    """Build, initialise and start a private server of ``kind``; skip (or fail in CI) when not installed."""
    server: PrivateServer
    if kind == "postgres":
        bindir = postgres_bindir()
        if bindir is None:
            _unavailable("PostgreSQL server binaries not found (looked for /usr/lib/postgresql/*/bin/postgres "
                         "and initdb on PATH); install postgresql to run the database-outage tests")
        if os.geteuid() == 0 and not _has_user("postgres"):
            _unavailable("running as root, the private PostgreSQL needs an OS user named 'postgres' "
                         "(PostgreSQL refuses to run as root)")
        server = PrivatePostgres(bindir)  # type: ignore[arg-type]
    elif kind == "mariadb":
        binaries = mariadb_binaries()
        if binaries is None:
            _unavailable("MariaDB server binaries not found (mariadb-install-db and mariadbd); "
                         "install mariadb-server to run the database-outage tests")
        server = PrivateMariaDB(*binaries)  # type: ignore[misc]
    else:
        raise ValueError(kind)
    try:
        server.initialise()
        start_on_a_free_port(server)
        server.create_database()
    except BaseException:
        server.destroy()
        raise
    return server


@pytest.fixture(scope="module", params=["postgres", "mariadb"])
def private_server(request: pytest.FixtureRequest) -> Iterator[PrivateServer]:
    """A private server per backend for the whole module, removed afterwards."""
    server = make_server(str(request.param))
    try:
        yield server
    finally:
        server.destroy()
