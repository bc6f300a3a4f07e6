"""A MySQL URL with several nodes (``mysql://u@h1:p1,h2:p2/db``): errands connects to the first that
answers ready, in the order given, and walks the list from the first again at every reconnect, so a
worker whose node died moves to another.  The "nodes" here are the shared MariaDB reached directly
and through loopback proxies that can be closed (a dead node) or never answer (a hung one); a
Galera node that answers but is not ready has its own test with the private cluster."""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

import pytest
from helpers import free_port, scaled, wait_for
from tcp_proxy import PartitionProxy

from errands import ConfigurationError, Errands, StoreUnavailable
from errands.diagnostics.checks import diagnose
from errands.diagnostics.model import Status
from errands.store.driver import scalar

pytestmark = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)


def _nodes_url(db_url: str, *nodes: str, query: str = "") -> str:
    """``db_url`` (the shared server's) with its host replaced by ``nodes``."""
    parts = urlsplit(db_url)
    user = parts.netloc.rpartition("@")[0]
    return f"mysql://{user}@{','.join(nodes)}{parts.path}" + (f"?{query}" if query else "")


def _server(db_url: str) -> str:
    parts = urlsplit(db_url)
    return f"{parts.hostname}:{parts.port or 3306}"


def _connection_id(app: Errands) -> int:
    return int(app.store.db.run_unchecked(lambda cur: (cur.execute("SELECT CONNECTION_ID()"), scalar(cur))[1]))


def test_a_node_that_refuses_is_passed_over(db_url):
    app = Errands(_nodes_url(db_url, f"127.0.0.1:{free_port()}", _server(db_url)))
    try:
        app.migrate()
        assert app.store.db.current_version() == app.store.dialect.schema_version
    finally:
        app.close()


def test_when_no_node_answers_the_error_names_every_node(db_url):
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    app = Errands(_nodes_url(db_url, *dead))
    try:
        with pytest.raises(StoreUnavailable) as refused:
            app.store.db.current_version()
        assert all(f"{node}: (2003)" in str(refused.value) for node in dead), refused.value
    finally:
        app.close()


def test_a_node_that_accepts_but_never_answers_is_passed_over_after_connect_timeout(db_url):
    # A listening socket nobody accepts on: the kernel completes the TCP handshake, and the server's
    # greeting never comes, as from a stopped server.  PyMySQL alone would wait for it for ever.
    with socket.create_server(("127.0.0.1", 0)) as hung:
        hung_node = f"127.0.0.1:{hung.getsockname()[1]}"
        app = Errands(_nodes_url(db_url, hung_node, _server(db_url), query="connect_timeout=1"))
        versions: list[int | None] = []
        reader = threading.Thread(target=lambda: versions.append(app.store.db.current_version()), daemon=True)
        reader.start()
        reader.join(scaled(30))
        assert len(versions) == 1, "connecting waited on the node that never answers"
        app.close()


def test_a_reconnect_walks_the_list_from_the_first_node_again(db_url):
    host, port = _server(db_url).split(":")
    first_port = free_port()
    first = PartitionProxy((host, int(port)), port=first_port)
    app = Errands(_nodes_url(db_url, f"127.0.0.1:{first_port}", _server(db_url)))
    try:
        app.migrate()
        assert first.accepted >= 1  # through the first node
        first.close()  # the first node dies: its connections drop, new ones are refused
        wait_for(lambda: _reaches_the_database(app), message="the store reconnected to the second node")
        accepted = first.accepted
        # The first node is back.  The next reconnect starts from it again, not from the node in use.
        first = PartitionProxy((host, int(port)), port=first_port)
        app.store.close()
        _connection_id(app)
        assert first.accepted == 1 and accepted >= 1
    finally:
        app.close()
        first.close()


def _reaches_the_database(app: Errands) -> bool:
    try:
        _connection_id(app)
        return True
    except StoreUnavailable:
        return False  # the call that found the connection dead; the next one reconnects


def test_wsrep_sync_wait_is_set_on_each_connection(db_url):
    app = Errands(_nodes_url(db_url, _server(db_url), query="wsrep_sync_wait=3"))
    try:
        value = app.store.db.run_unchecked(lambda cur: (cur.execute("SELECT @@SESSION.wsrep_sync_wait"),
                                                        scalar(cur))[1])
        assert int(value) == 3
    finally:
        app.close()


def test_wsrep_sync_wait_on_a_server_without_wsrep_is_a_configuration_error(db_url, monkeypatch):
    # MariaDB always has the variable (without Galera it does nothing); MySQL has none.  Stand in for
    # MySQL by asking the server to set a variable no server has, as the same statement would.
    from errands.store.dialects import mysql

    app = Errands(_nodes_url(db_url, _server(db_url), query="wsrep_sync_wait=1"))
    original = mysql.MySQLDialect._set_session

    def as_mysql(self, cur, node):  # type: ignore[no-untyped-def]
        original(self, _Unknown(cur), node)

    monkeypatch.setattr(mysql.MySQLDialect, "_set_session", as_mysql)
    try:
        with pytest.raises(ConfigurationError, match=r"wsrep_sync_wait= .* needs MariaDB Galera Cluster.*"
                                                     r"has no wsrep_sync_wait variable"):
            app.store.db.current_version()
        connectivity = diagnose(app).checks[0]  # errands doctor: a failed check, not a traceback
        assert connectivity.name == "connectivity" and connectivity.status is Status.FAIL
        assert "the database URL does not fit this server" in connectivity.detail
    finally:
        app.close()


class _Unknown:
    """A cursor whose SET of wsrep_sync_wait names a variable the server lacks (MySQL's error 1193)."""

    def __init__(self, cur):  # type: ignore[no-untyped-def]
        self.cur = cur

    def execute(self, sql, params=None):  # type: ignore[no-untyped-def]
        return self.cur.execute(sql.replace("wsrep_sync_wait", "errands_no_such_variable"), params)
