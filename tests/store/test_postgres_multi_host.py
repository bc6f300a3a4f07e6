"""What errands hands libpq from a multi-host URL (tests/e2e/test_failover.py runs the failover itself)."""

from __future__ import annotations

import pytest

from errands import Errands
from errands.store.dialects.postgres import CONNECT_TIMEOUT, driver_url

pg_only = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


def test_libpq_options_of_a_multi_host_url_reach_the_driver() -> None:
    url = ("postgresql://u:p@db1:5432,db2:5433/app?target_session_attrs=read-write&connect_timeout=3"
           "&pool_size=4&pooler=session")
    assert driver_url(url) == ("postgresql://u:p@db1:5432,db2:5433/app?target_session_attrs=read-write"
                               "&connect_timeout=3")


@pg_only
def test_the_urls_connect_timeout_wins(db_url: str) -> None:
    """libpq spends connect_timeout on each host in turn: a URL that lowers it must get it."""
    for suffix, expected in (("", CONNECT_TIMEOUT), ("connect_timeout=3", 3)):
        url = db_url + ("&" if "?" in db_url else "?") + suffix if suffix else db_url
        app = Errands(url)
        try:
            conn = app.store.dialect.connect()
            with conn:
                assert f"connect_timeout={expected}" in conn.info.dsn, conn.info.dsn
        finally:
            app.store.close()
