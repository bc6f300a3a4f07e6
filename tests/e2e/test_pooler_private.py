"""Transaction pooling in front of a PostgreSQL whose ``max_connections`` is 40 (issue 13, scaled down).

The issue's set-up is PgBouncer (transaction mode, ``default_pool_size = 10``) in front of a server
with ``max_connections = 40``, and 50 worker processes of ``-c 8``.  The shared server on 5432 is
never reconfigured, so this module starts a private one (``private_postgres.py``) with that limit,
once for the module (in one xdist group: tests/conftest.py's ONE_WORKER_MODULES), and drains
through a private PgBouncer with 8 supervisors of ``-c 8``: 64 runner threads and up to 56 client
connections against 40 server slots.  Every job must run once, and the server must never have
refused a login (``sorry, too many clients already``).  ``bench/pooler.py --private-postgres 40``
runs the same at the issue's full size.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import scaled
from pgbouncer import PrivatePgBouncer, require_pgbouncer
from private_postgres import TOO_MANY, ScratchPostgres, scratch_postgres
from test_pooler import _check_drained, drain_through

pytestmark = pytest.mark.timeout(scaled(300))

MAX_CONNECTIONS = 40
POOL_SIZE = 10
SUPERVISORS = 8
CONCURRENCY = 8
ROOTS = 2000
"""Root jobs; each enqueues one follow-up, so 4,000 jobs run in all."""
HARNESS_CONNECTIONS = 4
"""Direct connections of the test itself (its polls open one at a time; a backend may log its
disconnection after the next one logged in) on top of PgBouncer's pool."""


@pytest.fixture(scope="module")
def server() -> Iterator[ScratchPostgres]:
    yield from scratch_postgres(MAX_CONNECTIONS)


@pytest.fixture
def database(server: ScratchPostgres) -> Iterator[str]:
    name = f"errands_pooler_{secrets.token_hex(4)}"
    server.create(name)
    try:
        yield name
    finally:
        with server.connect() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_the_private_server_has_the_issues_limit(server: ScratchPostgres) -> None:
    assert server.show("max_connections") == str(MAX_CONNECTIONS)
    assert server.show("fsync") == "off"


def test_transaction_pooling_stays_within_max_connections(server: ScratchPostgres, database: str,
                                                         tmp_path: Path) -> None:
    bouncer = PrivatePgBouncer(require_pgbouncer(), pool_mode="transaction", default_pool_size=POOL_SIZE,
                               upstream_port=server.port)
    try:
        bouncer.start()
        result = drain_through(bouncer, database, tmp_path, roots=ROOTS, supervisors=SUPERVISORS,
                               concurrency=CONCURRENCY, admin=server.connect, pooler="transaction")
    finally:
        bouncer.destroy()
    _check_drained(result)
    assert TOO_MANY not in result["output"], result["output"][-4000:]
    assert server.refusals() == 0, server.log_tail()
    peak = server.peak_connections()
    print(f"peak {peak} server connections of {MAX_CONNECTIONS}")
    # 8 processes hold up to 56 client connections; PgBouncer gives them POOL_SIZE server connections.
    assert 0 < peak <= POOL_SIZE + HARNESS_CONNECTIONS, peak
