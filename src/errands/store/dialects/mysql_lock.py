"""A migration lock that holds across a Galera cluster: one row, won by a committed conditional UPDATE.

``GET_LOCK`` names a lock of one server: on Galera it is local to the node that took it (Galera's
documentation lists it among the unsupported or node-local features), so two ``errands migrate``
runs on two nodes would both get it and run the same DDL at once.  Committed writes are what
Galera does order cluster-wide: every node certifies a transaction's writes before it commits, so
of two nodes that change the same row at once one commits and the other gets a certification
failure (error 1213; after ``wsrep_retry_autocommit`` the re-run UPDATE matches no row).  Exactly
one migrator can therefore turn the row's holder from "nobody, or someone whose lease ran out" to
itself.

The row lives in ``{prefix}migration_lock``, created on demand by the lock itself (``CREATE TABLE
IF NOT EXISTS``, like the schema table): no schema version adds it.

The lease.  A migrator that crashes leaves the row held; its lease lets the next one in.  A thread
of the migrating process renews the lease on the lock's own connection every ``renew_every``
seconds for as long as the migration runs, so a long ALTER keeps the lock however long it takes,
and the lease only has to outlast a gap in the renewals.  It is generous (5 minutes) because on
Galera a DDL runs in Total Order Isolation: while a long ALTER applies, the cluster commits no
other write, renewals included, and a short lease would let a waiting migrator take the lock the
moment the ALTER ends, before the first migrator's next renewal.  The price: after a crash, other
migrators wait up to those 5 minutes (they say whom they wait for).  Waiters poll every ``poll``
seconds and give up after ``wait`` with an error naming the holder and its expiry.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ...core.errors import StoreUnavailable
from ..driver import Connection, fetch_row

log = logging.getLogger("errands.store")

TABLE = "migration_lock"
"""The lock table's name after the prefix (``errands_migration_lock``)."""
DDL = ("CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY, holder VARCHAR(120), "
       "expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB")
SEED = "INSERT IGNORE INTO {table} (id, holder, expires_at) VALUES (1, NULL, UTC_TIMESTAMP(6))"
"""The one row, free; a no-op once it exists."""
UNTIL = "(UTC_TIMESTAMP(6) + INTERVAL ROUND(%s * 1000000) MICROSECOND)"
TAKE = ("UPDATE {table} SET holder = %s, expires_at = " + UNTIL +
        " WHERE id = 1 AND (holder IS NULL OR expires_at < UTC_TIMESTAMP(6))")
"""Held by nobody, or by a migrator whose lease ran out: this one's now (1 row changed: won)."""
RENEW = "UPDATE {table} SET expires_at = " + UNTIL + " WHERE id = 1 AND holder = %s"
RELEASE = "UPDATE {table} SET holder = NULL, expires_at = UTC_TIMESTAMP(6) WHERE id = 1 AND holder = %s"
READ = "SELECT holder, expires_at, UTC_TIMESTAMP(6) AS now FROM {table} WHERE id = 1"
LOST_RACE = (1205, 1213)
"""Lock wait timeout, deadlock or Galera certification failure: another migrator's write won."""


@dataclass(frozen=True)
class LeaseTimes:
    """Seconds: the lease a holder takes and renews, how often it renews, how long a waiter waits in
    all and how often it looks (tests shorten them)."""

    lease: float = 300.0
    renew_every: float = 10.0
    wait: float = 900.0
    poll: float = 0.5


def new_holder() -> str:
    """This migration's name in the row: host, process and a random part (two migrations of one process
    are two holders)."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{secrets.token_hex(4)}"


def _code(exc: BaseException) -> Any:
    return exc.args[0] if exc.args else None


class LockRow:
    """The lock row of one migration, taken on a connection of its own (its commits never touch the
    migration's transaction) and renewed there by a thread while the migration runs."""

    def __init__(self, connect: Callable[[], Connection], table: str, times: LeaseTimes,
                 driver_error: type[BaseException]) -> None:
        self.connect, self.table, self.times, self.driver_error = connect, table, times, driver_error
        self.holder = new_holder()
        self.conn: Connection | None = None
        self.lost = False
        """Set when a renewal found the row taken over (the lease ran out without a renewal)."""

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        if self.conn is None:
            self.conn = self.connect()
        with self.conn.cursor() as cur:
            cur.execute(sql.format(table=self.table), params)
            return int(cur.rowcount)

    @contextmanager
    def held(self) -> Iterator[None]:
        try:
            self._execute(DDL)
            self._attempt(SEED)  # (the row is there after this, whoever inserted it)
            self._acquire()
            stop = threading.Event()
            renewer = threading.Thread(target=self._renew_until, args=(stop,), name="errands-migration-lock",
                                       daemon=True)
            renewer.start()
            try:
                yield
            finally:
                stop.set()
                renewer.join()
                self._release()
        finally:
            if self.conn is not None:
                self.conn.close()

    def _acquire(self) -> None:
        deadline = time.monotonic() + self.times.wait
        said = False
        while True:
            if self._try_take():
                return
            held = self._read()
            if time.monotonic() >= deadline:
                raise StoreUnavailable(
                    f"another migration holds the migration lock ({self.table}: holder {held.get('holder')!r}, "
                    f"lease until {held.get('expires_at')} UTC, renewed while it runs); waited "
                    f"{self.times.wait:g} s. Run `errands migrate` again once it has finished; if no migration "
                    f"runs, its lease ends by itself within {self.times.lease:g} s")
            if not said:
                log.info("waiting for the migration lock held by %s (lease until %s UTC)", held.get("holder"),
                         held.get("expires_at"))
                said = True
            time.sleep(self.times.poll)

    def _try_take(self) -> bool:
        return self._attempt(TAKE, (self.holder, self.times.lease)) == 1

    def _attempt(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """Rows changed by a write another migrator's write may beat (0 then, as if none matched)."""
        try:
            return self._execute(sql, params)
        except self.driver_error as exc:
            if _code(exc) in LOST_RACE:
                return 0
            raise

    def _read(self) -> dict[str, Any]:
        assert self.conn is not None  # _try_take connected
        with self.conn.cursor() as cur:
            cur.execute(READ.format(table=self.table))
            return fetch_row(cur) or {}

    def _renew_until(self, stop: threading.Event) -> None:
        """Renew the lease every ``renew_every`` seconds until ``stop``; a failed renewal is logged and
        tried again on a new connection at the next turn (the lease has minutes to spare)."""
        while not stop.wait(self.times.renew_every):
            try:
                if self._execute(RENEW, (self.times.lease, self.holder)) == 0:
                    self.lost = True
                    log.warning("the migration lock %s was taken over: its lease (%g s) ran out without a "
                                "renewal", self.table, self.times.lease)
                    return
            except self.driver_error as exc:
                log.warning("could not renew the migration lock %s: %s", self.table, exc)
                self._drop_connection()

    def _release(self) -> None:
        try:
            self._execute(RELEASE, (self.holder,))
        except self.driver_error as exc:  # the lease ends by itself; the migration's outcome stands
            log.warning("could not release the migration lock %s (its lease ends within %g s): %s", self.table,
                        self.times.lease, exc)

    def _drop_connection(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken: closing is best effort
                pass
