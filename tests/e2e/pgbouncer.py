"""A private PgBouncer in front of the shared PostgreSQL on 127.0.0.1:5432, for the pooler tests.

Each instance has its own directory (ini, userlist, log), a spare port on 127.0.0.1 and no Unix
socket; it trusts every user named in its userlist (``auth_type = trust``) and forwards every
database name to the shared server, or to another one (``upstream_port``: a private server of
``private_postgres.py``).  The shared server is never reconfigured: only this process
is started and stopped, as a child of the test process that the kernel stops if the test process
dies (``PR_SET_PDEATHSIG``, as for the private servers in ``private_servers.py``).

PgBouncer refuses to run as root: as root it runs as the ``postgres`` OS user.  Not installed: the
tests are skipped with a message (``make test`` installs Debian's package), except under CI=true.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from private_servers import PrivateServer, _unavailable

UPSTREAM_HOST = "127.0.0.1"
UPSTREAM_PORT = 5432
USER = "postgres"


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if Path(p).is_file()), None)


def require_pgbouncer() -> str:
    binary = pgbouncer_binary()
    if binary is None:
        _unavailable("pgbouncer is not installed (apt-get install -y pgbouncer; `make test` does it)")
    assert binary is not None
    return binary


class PrivatePgBouncer(PrivateServer):
    kind = "pgbouncer"
    stop_signal = signal.SIGINT  # "safe shutdown" would wait for clients; SIGINT closes at once
    orphan_signal = signal.SIGTERM

    def __init__(self, binary: str, *, pool_mode: str, default_pool_size: int = 8, max_client_conn: int = 2000,
                 max_db_connections: int = 0, upstream_port: int = UPSTREAM_PORT) -> None:
        super().__init__()
        self.binary = binary
        self.upstream_port = upstream_port
        self.settings = {
            "listen_addr": "127.0.0.1", "listen_port": str(self.port), "unix_socket_dir": "",
            "auth_type": "trust", "auth_file": str(self.dir / "userlist.txt"),
            "pool_mode": pool_mode, "default_pool_size": str(default_pool_size),
            "max_client_conn": str(max_client_conn), "max_db_connections": str(max_db_connections),
            "reserve_pool_size": "0",
            "server_reset_query": "DISCARD ALL", "ignore_startup_parameters": "extra_float_digits",
            "admin_users": USER, "pidfile": "",  # logs to stderr: server.log
            "log_connections": "0", "log_disconnections": "0",
        }
        if self.version() >= (1, 21):
            # Protocol-level prepared statements (1.21+; 1.24 enables them by default): off, so that a
            # newer PgBouncer is as unforgiving as 1.18, the version of the issue.
            self.settings["max_prepared_statements"] = "0"
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self.run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}

    def version(self) -> tuple[int, ...]:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=30).stdout
        found = re.search(r"PgBouncer (\d+)\.(\d+)", out)
        return (int(found.group(1)), int(found.group(2))) if found else (0,)

    def write_config(self) -> Path:
        """The ini and the userlist (trust still needs the user listed)."""
        (self.dir / "userlist.txt").write_text(f'"{USER}" ""\n')
        lines = ["[databases]", f"* = host={UPSTREAM_HOST} port={self.upstream_port}", "", "[pgbouncer]"]
        lines += [f"{key} = {value}" for key, value in self.settings.items()]
        ini = self.dir / "pgbouncer.ini"
        ini.write_text("\n".join(lines) + "\n")
        for path in (ini, self.dir / "userlist.txt"):
            os.chmod(path, 0o644)
        return ini

    def command(self) -> list[str]:
        return [self.binary, str(self.write_config())]

    def url(self, database: str, **options: str) -> str:  # type: ignore[override]
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}" + (f"?{query}" if query else "")

    def admin_connect(self) -> Any:
        """The pgbouncer admin console (answers once the pooler accepts connections)."""
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname="pgbouncer",
                               autocommit=True, connect_timeout=2)

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW POOLS`` and friends on the admin console, as dicts."""
        with self.admin_connect() as conn:
            cur = conn.execute(f"SHOW {what}")
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
