"""The store: focused parts over one database and its dialect.

``store.jobs`` (enqueue, claim, leases, dead letter), ``store.endings`` (how attempts end: every
terminal write), ``store.workers`` (the registry),
``store.features`` (unique keys, batches, limits, schedules, results, cancel, progress),
``store.workflows`` (a workflow's graph and states, cancelling one),
``store.insights`` (read models), ``store.operations`` (bulk changes to waiting jobs),
``store.accounts`` (dashboard users), ``store.alerts`` (alert thresholds' crossing state) and
``store.schedules`` (schedules stored in the database, the claim of every schedule's slots) share one
:class:`~errands.store.database.Database`; the store itself holds the lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from .accounts import AccountStore
from .alerts import AlertStore
from .database import Database
from .dialects.base import Dialect, Listener
from .endings import EndingStore
from .features import FeatureStore
from .insights import InsightStore
from .jobs import JobStore
from .operations import OperationStore
from .schedules import ScheduleStore
from .steps import Steps
from .workers import WorkerStore
from .workflows import WorkflowStore


class Store:
    """errands' tables in one database, as the app, workers and dashboard use them."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.db = Database(dialect)
        self.url = dialect.url
        self.prefix = dialect.prefix
        steps = Steps(dialect)
        self.jobs = JobStore(self.db, steps)
        self.endings = EndingStore(self.db, steps)
        self.workers = WorkerStore(self.db)
        self.features = FeatureStore(self.db, steps)
        self.workflows = WorkflowStore(self.db, steps)
        self.insights = InsightStore(self.db)
        self.accounts = AccountStore(self.db)
        self.operations = OperationStore(self.db, steps)
        self.alerts = AlertStore(self.db)
        self.schedules = ScheduleStore(self.db, steps)

    @property
    def safe_url(self) -> str:
        return self.db.safe_url

    def migrate(self, progress: Callable[[int], None] | None = None, *, to: int | None = None,
                cursor: Any = None) -> list[int]:
        """Create or upgrade the tables, up to version ``to`` if given (see :meth:`Database.migrate`)."""
        return self.db.migrate(progress, to=to, cursor=cursor)

    def check(self) -> None:
        """Connect now and check the schema (SQLite: create or upgrade it), or raise: ``SchemaError``
        when errands' tables are missing or at another version, ``StoreUnavailable`` when the
        database cannot be reached or takes no statements now (never read as tables missing).

        Every statement checks the schema once per process anyway; this exists for the processes
        that must fail at start-up, in their caller and with a clear message, rather than later in
        a forked child, a worker thread or the first request: ``errands worker`` (before forking),
        ``errands dashboard`` and ``errands metrics``, ``manage.py errands_worker`` and the
        in-process worker (before their thread starts).  It costs one borrowed connection and no
        statement once the schema was checked."""
        self.db.run(_connected)

    def current_version(self) -> int | None:
        """The recorded schema version; None when errands' tables do not exist (never migrates).  Only the
        database's own "no such table" means that: a refusal for another reason (a Galera node out of its
        cluster, a server in recovery) raises StoreUnavailable, a denied right StoreError."""
        return self.db.current_version()

    def pending_migration_steps(self, *, to: int | None = None) -> int:
        return self.db.pending_migration_steps(to=to)

    def migration_sql(self) -> str:
        return self.db.migration_sql()

    def now(self) -> datetime:
        """The database's clock: every due time and lease is judged by it, not by this host's."""
        return self.db.now()

    def listener(self) -> Listener | None:
        """A way to sleep until jobs are enqueued, where the database has one (None: poll)."""
        return self.dialect.listener()

    def dedicate_thread(self, dedicated: bool = True) -> None:
        """Let this thread keep a connection of its own instead of borrowing from the shared pool
        (see :meth:`Database.dedicate_thread`)."""
        self.db.dedicate_thread(dedicated)

    def release_thread_connection(self) -> None:
        """Close this thread's connection (threads that end call this, so none is left open)."""
        self.db.release_thread_connection()

    def close(self) -> None:
        """Close every connection this process opened, in any thread."""
        self.db.close()


def _connected(cursor: Any) -> None:
    """Nothing to run: :meth:`Store.check` needs only the schema check and the connection ``run`` makes."""
