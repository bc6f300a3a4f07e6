"""A database URL errands cannot use is refused before anything connects, on every backend: a
ConfigurationError naming the problem (and the options the backend knows), exit 78 from the command
line, the password masked; never a ValueError traceback from ``urlsplit``, never an option ignored."""

from __future__ import annotations

import pytest
from helpers import invoke_cli

from errands import ConfigurationError, Errands
from errands.core.config import mask_url
from errands.store.dialects.mysql import MySQLDialect
from errands.store.dialects.postgres import PostgresDialect
from errands.store.dialects.sqlite import SQLiteDialect
from errands.store.dialects.urls import HostPort

REFUSED = [
    # (url, words the error must carry)
    ("mysql://u:s3cret@h:3411,h:3412,h:abc/db", "port 'abc' of host 'h'"),
    ("mysql://u@h:abc/db", "port 'abc'"),
    ("mysql://u@h:70000/db", "port '70000'"),
    ("mysql://u@h:3411,,h:3413/db", "an empty host in the host list"),
    ("mysql://u@:3306/db", "an empty host"),
    ("mysql://u@h:3306/", "names no database"),
    ("mysql://u:s3cret@[::1/db", "not a URL"),
    ("mysql://u@h/db?clam=update", "unknown option 'clam'; known options: claim, connect_timeout"),
    ("mysql://u@h/db?charset=latin1&ssl=1", "unknown options 'charset', 'ssl'"),
    ("mysql://u@h/db?wsrep_sync_wait=16", "wsrep_sync_wait='16' must be a whole number from 0 to 15"),
    ("mysql://u@h/db?wsrep_sync_wait=one", "wsrep_sync_wait='one'"),
    ("mysql://u@h/db?connect_timeout=0", "connect_timeout='0' must be seconds, more than 0"),
    ("postgresql://u:s3cret@h/db?sslmod=require", 'invalid URI query parameter: "sslmod"'),
    ("postgresql://h:abc/db", "port 'abc' is not a number"),
    ("postgresql://h1:5432,h2:x/db", "port 'x'"),
    ("postgresql://u:s3cret@[::1/db", "not a URL"),
    ("sqlite:///jobs.db?synchronus=full", "unknown option 'synchronus'; known options: busy_timeout, pool_size"),
    ("sqlite:///jobs.db?busy_timeout=soon", "busy_timeout='soon' must be a whole number of milliseconds"),
]


@pytest.mark.parametrize(("url", "words"), REFUSED)
def test_a_url_errands_cannot_use_is_a_configuration_error(url, words):
    with pytest.raises(ConfigurationError) as refused:
        Errands(url).store  # noqa: B018 - opening the store reads the URL
    said = str(refused.value)
    assert words in said
    assert "s3cret" not in said and mask_url(url) in said


def test_postgres_refusals_list_errands_own_options_and_point_at_libpq():
    with pytest.raises(ConfigurationError, match="errands' own options are listen_url, pool_size, pool_timeout, "
                                                 "pooler, read_url.*libpq-connect"):
        PostgresDialect("postgresql://h/db?target_session_attr=read-write")


def test_every_option_each_backend_reads_is_accepted():
    mysql = MySQLDialect("mysql://u:pw@h/db?claim=update&unix_socket=/run/mysqld.sock&connect_timeout=2.5"
                         "&wsrep_sync_wait=3&read_url=mysql%3A%2F%2Fu%40replica%2Fdb&pool_size=2&pool_timeout=5")
    assert (mysql.claim_setting, mysql.wsrep_sync_wait, mysql.pool_size) == ("update", 3, 2)
    assert mysql._params["connect_timeout"] == 2.5 and mysql._params["unix_socket"] == "/run/mysqld.sock"
    PostgresDialect("postgresql://u@h1:5432,h2/db?target_session_attrs=read-write&sslmode=prefer&pooler=session"
                    "&listen_url=postgresql%3A%2F%2Fh1%2Fdb&read_url=postgresql%3A%2F%2Fh2%2Fdb&pool_size=3")
    PostgresDialect("postgresql://,h2/db")  # libpq's own: an empty entry is its default host (the socket)
    socket = PostgresDialect("postgresql+psycopg:///app?host=/run/postgresql&pooler=session")
    assert socket._conninfo == "postgresql:///app?host=%2Frun%2Fpostgresql"  # (not "postgresql:/app")
    sqlite = SQLiteDialect("sqlite:///jobs.db?busy_timeout=500&synchronous=full&pool_size=2")
    assert (sqlite.busy_timeout_ms, sqlite.synchronous) == (500, "full")


def test_a_mysql_host_list_keeps_its_order_ports_and_ipv6_nodes():
    d = MySQLDialect("mysql://app:pw@db1:3411,db2,[fd00::3]:3413/shop")
    assert d.hosts == [HostPort("db1", 3411), HostPort("db2", 3306), HostPort("fd00::3", 3413)]
    assert ", ".join(map(str, d.hosts)) == "db1:3411, db2:3306, [fd00::3]:3413"
    assert (d._params["host"], d._params["port"], d._params["user"], d._params["database"]) == \
        ("db1", 3411, "app", "shop")
    assert MySQLDialect("mysql:///shop").hosts == [HostPort("127.0.0.1", 3306)]


def test_mask_url_shows_every_host_and_no_password():
    assert mask_url("mysql://app:pw@db1:3411,db2:3412/shop?read_url=mysql%3A%2F%2Fr%3Asecret%40db3%2Fshop") == \
        "mysql://app:***@db1:3411,db2:3412/shop?read_url=mysql%3A%2F%2Fr%3A***%40db3%2Fshop"
    assert mask_url("mysql://app:pw@[::1/shop") == "mysql://app:***@[::1/shop"


@pytest.mark.parametrize("url", ["mysql://u:s3cret@h:3411,h:3412,h:abc/db", "mysql://u@h/db?nope=1",
                                 "postgresql://h/db?nope=1", "sqlite:///jobs.db?nope=1",
                                 "mysqll://u:s3cret@h/db"])
def test_the_command_line_says_it_as_a_configuration_error(url):
    done = invoke_cli(url, "status")
    assert done.returncode == 78, done.stderr
    assert "Traceback" not in done.stderr and "ValueError" not in done.stderr
    assert "s3cret" not in done.stderr
    assert any(words in done.stderr for words in ("option 'nope'", '"nope"', "port 'abc'", "scheme 'mysqll'"))
