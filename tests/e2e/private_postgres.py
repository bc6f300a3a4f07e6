"""A private PostgreSQL with settings of its own (``max_connections`` above all), for the pooler tests.

The issue-13 set-up puts PgBouncer in front of "a PostgreSQL whose ``max_connections`` is 40"; the
shared server on 127.0.0.1:5432 must never be reconfigured, so the tests and ``bench/pooler.py``
start their own: ``initdb`` into a temporary directory (as ``private_servers.PrivatePostgres`` does
for the outage tests), ``postgres`` started directly as a child of the test process on a spare port
of 127.0.0.1 with the given settings, its Unix socket inside the directory, ``fsync = off``, and
``trust`` authentication for the superuser ``postgres`` (local and TCP, so that a private PgBouncer
can log in the way it does on the shared server).  PostgreSQL refuses to run as root: as root the
directory and the processes belong to the ``postgres`` OS user.  ``start()`` returns once a login
succeeds (it connects until one does, no fixed sleep); ``destroy()`` stops the server and deletes
the directory.

The server logs every connection and disconnection, so that ``peak_connections()`` can tell, after
a run, how many backends were connected at the same time at most, and ``refusals()`` how many
logins it turned away with ``sorry, too many clients already``.

Binaries not installed: the tests are skipped with a message, except under CI=true.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from helpers import scaled
from private_servers import PrivatePostgres, _has_user, _unavailable, postgres_bindir, start_on_a_free_port

TOO_MANY = "too many clients already"
"""PostgreSQL's refusal once ``max_connections`` backends are connected (FATAL 53300)."""


def require_postgres_bindir() -> Path:
    bindir = postgres_bindir()
    if bindir is None:
        _unavailable("PostgreSQL server binaries not found (looked for /usr/lib/postgresql/*/bin/initdb and "
                     "initdb on PATH); install postgresql to run the private-PostgreSQL pooler tests")
    if os.geteuid() == 0 and not _has_user("postgres"):
        _unavailable("running as root, the private PostgreSQL needs an OS user named 'postgres' "
                     "(PostgreSQL refuses to run as root)")
    assert bindir is not None
    return bindir


class ScratchPostgres(PrivatePostgres):
    """A throw-away PostgreSQL server: trust auth, the given ``max_connections`` and settings."""

    kind = "postgres"

    def __init__(self, bindir: Path, *, max_connections: int = 40, **settings: str) -> None:
        super().__init__(bindir)
        self.settings = {
            "max_connections": str(max_connections),
            "log_connections": "on", "log_disconnections": "on",  # for peak_connections()
            "log_line_prefix": "%m [%p] ",
            **settings,
        }

    @property
    def max_connections(self) -> int:
        return int(self.settings["max_connections"])

    def initialise(self) -> None:
        done = subprocess.run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                               "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                              cwd=self.dir, capture_output=True, text=True, timeout=scaled(120), **self.run_as)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def command(self) -> list[str]:
        # postgres -D data, port, socket directory, fsync=off, ...; a later -c of the same name wins.
        return super().command() + [arg for key, value in self.settings.items() for arg in ("-c", f"{key}={value}")]

    def create_database(self) -> None:
        """Nothing: the tests make their own databases (``create``), owned by ``postgres``."""

    def connect(self, database: str = "postgres") -> Any:
        """A superuser connection (autocommit) over the server's Unix socket, never through a pooler."""
        import psycopg

        return psycopg.connect(host=str(self.dir), port=self.port, user="postgres", dbname=database,
                               autocommit=True, connect_timeout=max(2, round(scaled(5))))

    def create(self, database: str) -> None:
        with self.connect() as conn:
            conn.execute(f"CREATE DATABASE {database}")

    @property
    def url(self) -> str:  # the superuser over TCP, as a PgBouncer in front of it logs in
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def peak_connections(self) -> int:
        """The most client backends connected at once since the start, from the connection log.

        Each backend logs ``connection authorized`` once logged in and ``disconnection`` when it
        ends; the log is written in the order things happen, so a running count gives the peak.
        Backends refused at login never count (they are not authorised)."""
        peak = live = 0
        for line in self._log().splitlines():
            if "connection authorized:" in line:
                live += 1
                peak = max(peak, live)
            elif "disconnection:" in line:
                live = max(0, live - 1)
        return peak

    def refusals(self) -> int:
        """Logins refused because ``max_connections`` backends were already connected."""
        return self._log().count(TOO_MANY)

    def show(self, setting: str) -> str:
        with self.connect() as conn:
            return str(conn.execute(f"SHOW {setting}").fetchone()[0])


def start_scratch_postgres(max_connections: int = 40, **settings: str) -> ScratchPostgres:
    """Initialise and start a :class:`ScratchPostgres`; skip (or fail in CI) when PostgreSQL is missing."""
    server = ScratchPostgres(require_postgres_bindir(), max_connections=max_connections, **settings)
    try:
        server.initialise()
        start_on_a_free_port(server)
    except BaseException:
        server.destroy()
        raise
    return server


def scratch_postgres(max_connections: int = 40, **settings: str) -> Iterator[ScratchPostgres]:
    """The body of a fixture: a started server, stopped and removed afterwards."""
    server = start_scratch_postgres(max_connections, **settings)
    try:
        yield server
    finally:
        server.destroy()


def peak_line(server: ScratchPostgres) -> str:
    """One line for a report: peak backends against the limit, and refusals."""
    return (f"peak {server.peak_connections()} of max_connections {server.max_connections} server connections, "
            f"{server.refusals()} refused")

