"""errands on the nodes of a private 3-node Galera cluster: migrations serialised cluster-wide, and a
multi-host URL that leaves a killed node and a node cut off from the cluster.

- ``migrate`` from node 2 waits while a migration holds the lock on node 1: on Galera the lock is a
  row of ``errands_migration_lock`` (GET_LOCK would hold on node 1 only, and node 2 would go on);
  two migrations started at once on two nodes both succeed (with GET_LOCK one failed here on the
  schema table's duplicate version row);
- ``mysql://u@node1,node2,node3/db``: a node killed, the next connection goes to node 2; node 1 back,
  a new connection goes to it again (the list is walked from the first); node 1 cut off from the
  cluster (it still answers, ``wsrep_ready`` OFF), a new connection goes to node 2.

One private cluster for the module (tests/e2e/private_galera.py, about 10 s to start); each test its
own table prefix, so no test sees another's tables.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterator

import pytest
from helpers import scaled, wait_for

from errands import Errands, StoreUnavailable
from errands.store.driver import scalar

private_galera = pytest.importorskip("private_galera", reason="the private Galera cluster fixture "
                                     "(tests/e2e/private_galera.py) is not in this tree")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[private_galera.GaleraCluster]:
    yield from private_galera.galera_cluster()


@pytest.fixture
def prefix(cluster: private_galera.GaleraCluster) -> str:
    cluster.heal()
    return f"t{secrets.token_hex(3)}_"


def _port(app: Errands) -> int:
    """The SQL port of the node the store's connection reached."""
    return int(app.store.db.run_unchecked(lambda cur: (cur.execute("SELECT @@port"), scalar(cur))[1]))


def test_a_migration_on_another_node_waits_for_the_lock_row(cluster, prefix, caplog) -> None:
    caplog.set_level(logging.INFO, logger="errands.store")
    first, second = (Errands(node.url, table_prefix=prefix) for node in cluster.nodes[:2])
    conn = first.store.dialect.connect()
    held = first.store.dialect.migration_lock(conn)  # auto: @@wsrep_on is ON, so the row
    held.__enter__()
    done = threading.Event()
    try:
        def migrate() -> None:
            second.migrate()
            done.set()

        threading.Thread(target=migrate, daemon=True).start()
        wait_for(lambda: "waiting for the migration lock held by" in caplog.text,
                 message="the migration on node 2 waiting for node 1's lock")
        assert not done.is_set()
    finally:
        held.__exit__(None, None, None)
        conn.close()
    assert done.wait(scaled(120)), "the migration on node 2 did not go on once node 1 released the lock"
    assert first.store.db.current_version() == first.store.dialect.schema_version
    first.close()
    second.close()


def test_a_multi_host_url_leaves_a_killed_node_and_a_node_cut_off(cluster, prefix) -> None:
    node1, node2, _ = cluster.nodes
    app = Errands(cluster.url_all(), table_prefix=prefix)
    try:
        assert _port(app) == node1.port
        node1.kill()
        began = time.monotonic()
        wait_for(lambda: _reached(app) == node2.port, timeout=60, message="the store on node 2 after node 1 died")
        moved = time.monotonic() - began
        node1.start()
        app.store.close()  # the next connection walks the list from the first node again
        assert _port(app) == node1.port
        node1.isolate()
        app.store.close()
        began = time.monotonic()
        assert _port(app) == node2.port, "connected to a node cut off from the cluster"
        print(f"\ngalera: on node 2 {moved * 1000:.0f} ms after node 1 was killed; a connection past the cut-off "
              f"node 1 took {(time.monotonic() - began) * 1000:.0f} ms")
    finally:
        app.close()
        cluster.heal()


def _reached(app: Errands) -> int | None:
    try:
        return _port(app)
    except StoreUnavailable:
        return None  # the call that found its connection dead; the next one reconnects


def test_two_migrations_started_at_once_on_two_nodes_both_succeed(cluster, prefix) -> None:
    apps = [Errands(node.url, table_prefix=prefix) for node in cluster.nodes[:2]]
    start = threading.Barrier(len(apps))
    failures: list[BaseException] = []

    def migrate(app: Errands) -> None:
        start.wait()
        try:
            app.migrate()
        except BaseException as exc:  # reported below, with the node's error
            failures.append(exc)

    threads = [threading.Thread(target=migrate, args=(app,), daemon=True) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(scaled(180))
    assert failures == [] and not any(t.is_alive() for t in threads)
    assert apps[1].store.db.current_version() == apps[1].store.dialect.schema_version
    for app in apps:
        app.close()
