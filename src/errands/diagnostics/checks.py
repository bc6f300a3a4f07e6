"""The checks that read the same way on every database, and the order a diagnosis runs in.

Dialect facts (versions, settings, catalogs, table sizes) come from the dialect's own
module (``sqlite.py``, ``postgres.py``, ``mysql.py``), chosen by ``store.dialect.name``; this
module compares, measures and words what they report.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

from ..core import wire
from ..core.config import mask_url
from ..core.errors import ConfigurationError, ErrandsError, StoreError, StoreUnavailable
from ..core.extras import MissingExtra
from ..services.operator import workers_view
from ..store.registry import by_name, by_scheme
from ..worker.liveness import alive_within, forget_worker_after
from .commands import command, same_options
from .connections import connections
from .context import DoctorContext
from .model import Check, Report, Status
from .replica import read_replica
from .schema import Drift, ExpectedSchema, LiveSchema, compare, expected_schema
from .transactions import open_transactions
from .unreachable import Cause, Explained, explain

if TYPE_CHECKING:
    from ..app import Errands

SKEW_WARN_SECONDS = 2.0
"""Clock differences below this are within what NTP-synchronised hosts show."""
PLAN_MATTERS_FROM_ROWS = 10_000
"""Below this many jobs a planner may rightly prefer reading the table to using the claim index."""


class DialectFacts(Protocol):
    """What each dialect module provides (each one holds its own SQL)."""

    ANALYZE: str
    UNREACHABLE: tuple[Cause, ...]
    DEFAULT_PORT: int
    ENQUEUE_ENTRY_SQL: str
    HELD_BACK_SQL: str | None
    END_TRANSACTION: Mapping[str, str]

    def before_connect(self, ctx: DoctorContext) -> Check | None: ...
    def server(self, ctx: DoctorContext) -> Check: ...
    def live_schema(self, ctx: DoctorContext) -> LiveSchema: ...
    def claim_mode(self, ctx: DoctorContext) -> Check: ...
    def settings(self, ctx: DoctorContext) -> list[Check]: ...
    def jobs_table(self, ctx: DoctorContext) -> Check: ...


def dialect_facts(dialect: str) -> DialectFacts:
    """The module for ``dialect``, imported on demand (each imports its own driver)."""
    return cast(DialectFacts, importlib.import_module(f".{by_name(dialect).diagnostics}", __package__))


class _Stop(Exception):
    """The database went away mid-diagnosis: the remaining checks cannot run."""


def diagnose(app: Errands) -> Report:
    """Run every check against ``app``'s database and return them in order; never raises for a
    database problem (an unreachable server is a failed check, not an exception)."""
    report = Report(mask_url(app.database_url), "unknown")
    try:
        store = app.store
    except MissingExtra as exc:
        report.add(Check("connectivity", Status.FAIL, f"this database's driver is not installed: {exc}",
                         fix=f"pip install 'errands[{exc.extra}]' in the environment errands runs from"))
        return report
    except ErrandsError as exc:
        report.add(Check("connectivity", Status.FAIL, f"the database URL is unusable: {exc}",
                         fix="fix the URL (--database-url, ERRANDS_DATABASE_URL or your app's database_url)"))
        return report
    report.dialect = store.dialect.name
    facts = dialect_facts(store.dialect.name)
    ctx = DoctorContext(app, store, expected_schema(store))
    try:
        blocked = facts.before_connect(ctx)
        if blocked is not None:
            report.add(blocked)
            return report
        if report.add(connectivity(ctx, facts)).status is Status.FAIL:
            return report
        for name, step in _steps(ctx, facts):
            _record(report, name, step)
    except _Stop:
        pass
    return report


def _steps(ctx: DoctorContext, facts: DialectFacts) -> Iterable[tuple[str, Callable[[], Check | list[Check]]]]:
    """Each check after connectivity, in report order.  A generator, so that later steps see
    what earlier ones learned (the recorded version, the live schema)."""
    yield "server", lambda: facts.server(ctx)
    yield "schema_version", lambda: schema_version(ctx, facts)
    yield "schema_drift", lambda: schema_drift(ctx)
    has_jobs = ctx.live is not None and ctx.store.dialect.t_jobs in ctx.live.tables
    if has_jobs:
        yield "claim_index", lambda: claim_index(ctx, facts)
        yield "claim_mode", lambda: facts.claim_mode(ctx)
    else:
        yield "claim_index", lambda: _not_checked("claim_index", f"{ctx.store.dialect.t_jobs} does not exist")
        yield "claim_mode", lambda: _not_checked("claim_mode", f"{ctx.store.dialect.t_jobs} does not exist")
    yield "settings", lambda: facts.settings(ctx)
    yield "clock_skew", lambda: clock_skew(ctx)
    if has_jobs:
        yield "jobs_table", lambda: facts.jobs_table(ctx)
    else:
        yield "jobs_table", lambda: _not_checked("jobs_table", f"{ctx.store.dialect.t_jobs} does not exist")
    yield "open_transactions", lambda: open_transactions(ctx, facts)
    if ctx.schema_current:
        yield "sql_enqueue", lambda: sql_enqueue(ctx, facts)
        yield "workers", lambda: workers(ctx)
        yield "connections", lambda: connections(ctx)
    else:
        yield "workers", lambda: _not_checked("workers", "the schema is not at the version this code needs")
    if ctx.app.read_router.replica_url is not None:
        yield "read_replica", lambda: read_replica(ctx)


def sql_enqueue(ctx: DoctorContext, facts: DialectFacts) -> Check:
    """Whether the entry point other programs enqueue through is in place (docs/wire-format.md).  A
    warning when it is not: errands works without it, but a program or trigger calling it fails.  On
    MySQL ``errands migrate`` passes over it for a user without CREATE ROUTINE."""
    name = ctx.store.prefix + wire.ENTRY_POINT
    found = ctx.read(lambda cur: (cur.execute(facts.ENQUEUE_ENTRY_SQL, (name,)), cur.fetchone())[1])
    data = {"entry_point": name, "wire_format": wire.WIRE_VERSION}
    if found and found[0]:
        return Check("sql_enqueue", Status.OK, f"{name} is in place: programs and triggers can enqueue from SQL "
                     f"(wire format version {wire.WIRE_VERSION})", data=data)
    grant = ("grant the user that migrates CREATE ROUTINE and ALTER ROUTINE on this database, then run the "
             f"{name} statements of `{command('migrate', '--sql')}` with the mysql client"
             if ctx.store.dialect.name == "mysql" else
             f"run the {name} statements of `{command('migrate', '--sql')}` (version 11)")
    return Check("sql_enqueue", Status.WARN, f"{name} is missing (or this user cannot see it): a program or trigger "
                 "that enqueues from SQL fails; errands itself is unaffected", fix=grant, data=data)


def _not_checked(name: str, why: str) -> Check:
    return Check(name, Status.INFO, f"not checked: {why} (see above)")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _record(report: Report, name: str, step: Callable[[], Check | list[Check]]) -> None:
    try:
        result = step()
    except StoreUnavailable as exc:
        report.add(Check(name, Status.FAIL, f"the database became unavailable during this check: {_one_line(exc)}",
                         fix="the database stopped answering, or takes no statements now (a Galera node out of "
                             "its cluster, a server in recovery); check the server and the network, then run "
                             f"`{command('doctor')}` again"))
        raise _Stop from exc
    except StoreError as exc:
        report.add(Check(name, Status.WARN, f"could not check: {_one_line(exc)}",
                         fix="the database user may lack the right to read this part of the catalog; "
                             "the other checks stand"))
        return
    for check in result if isinstance(result, list) else [result]:
        report.add(check)


# ---------------------------------------------------------------------- connectivity
def refused_connection(url: str, message: str) -> Explained | None:
    """Why the server at ``url`` refused a connection, when its answer (``message``, the driver's
    words) is a matter of configuration (no such database or role: ``Cause.configuration``); None
    when it is not, or not known.  The command line's exit code (78, not 3) rests on this."""
    backend = by_scheme(urlsplit(url).scheme)
    if backend is None:
        return None
    try:
        facts = dialect_facts(backend.name)
    except ImportError:  # the driver is not installed: nothing connected, so nothing was refused
        return None
    known = explain(facts.UNREACHABLE, message, url, facts.DEFAULT_PORT)
    return known if known is not None and known.configuration else None


def connectivity(ctx: DoctorContext, facts: DialectFacts | None = None) -> Check:
    """Connect (the store's own way) and time one round trip on the open connection; a failure
    names its cause and the fix when the dialect knows the driver's message (``UNREACHABLE``)."""
    started = time.perf_counter()
    try:
        ctx.read(lambda cur: cur.execute("SELECT 1"))
        connected = time.perf_counter()
        ctx.read(lambda cur: cur.execute("SELECT 1"))
    except ConfigurationError as exc:  # the server cannot do what the URL asks (?wsrep_sync_wait= without wsrep)
        return Check("connectivity", Status.FAIL, f"the database URL does not fit this server: {_one_line(exc)}",
                     fix="fix the URL (--database-url, ERRANDS_DATABASE_URL or your app's database_url)")
    except (StoreUnavailable, StoreError) as exc:
        said = _one_line(exc)
        known = explain(facts.UNREACHABLE, said, ctx.app.database_url, facts.DEFAULT_PORT) if facts else None
        if known is not None:
            return Check("connectivity", Status.FAIL, f"{known.means} ({said})", fix=known.fix)
        if isinstance(exc, StoreUnavailable):
            return Check("connectivity", Status.FAIL, f"cannot reach the database: {said}",
                         fix="check that the server runs and accepts connections at that host and port, and the "
                             "user, password and database name in the URL")
        return Check("connectivity", Status.FAIL, f"the database refused a trivial query: {said}",
                     fix="check the user's rights on this database")
    round_trip = time.perf_counter() - connected
    data = {"connect_seconds": round(connected - started, 4), "round_trip_seconds": round(round_trip, 5)}
    return Check("connectivity", Status.OK, f"connected in {(connected - started) * 1000:.1f} ms, "
                 f"round trip {round_trip * 1000:.2f} ms", data=data)


# ---------------------------------------------------------------------- schema
def schema_version(ctx: DoctorContext, facts: DialectFacts) -> Check:
    store = ctx.store
    ctx.live = facts.live_schema(ctx)
    recorded = ctx.recorded_version = store.current_version()
    code = store.dialect.schema_version
    data = {"recorded": recorded, "code": code}
    migrate = f"run `{command('migrate')}` ({same_options()})"
    if recorded is None:
        auto = " (SQLite: errands would also create them on first use)" if store.dialect.auto_migrate else ""
        return Check("schema_version", Status.FAIL, f"errands' tables do not exist here ({store.dialect.t_schema} is "
                     f"missing){auto}", fix=migrate, data=data)
    if recorded == 0:
        return Check("schema_version", Status.FAIL, f"{store.dialect.t_schema} exists but records no version",
                     fix=migrate, data=data)
    if recorded > code:
        return Check("schema_version", Status.FAIL, f"the schema is at version {recorded}, newer than this code "
                     f"(version {code}): a newer errands migrated this database",
                     fix="upgrade errands here to the release your workers run (pip install -U errands)", data=data)
    if recorded < code:
        return _older_schema(ctx, recorded, code, data)
    return Check("schema_version", Status.OK, f"version {recorded}, as this code needs", data=data)


def _older_schema(ctx: DoctorContext, recorded: int, code: int, data: dict[str, Any]) -> Check:
    """An older recorded version: usually an upgrade not yet migrated; but if the newer versions'
    tables are all there, the version rows were lost (and migrating would trip over them)."""
    store = ctx.store
    assert ctx.live is not None
    before, live = expected_schema(store, recorded), ctx.live
    newer_columns = [(t, c) for t, spec in ctx.expected.tables.items() for c in spec.columns
                     if t not in before.tables or c not in before.tables[t].columns]
    newer_indexes = [i for i in ctx.expected.indexes if i not in before.indexes]
    present = bool(newer_columns or newer_indexes) and all(
        c in live.tables.get(t, {}) for t, c in newer_columns) and all(i in live.indexes for i in newer_indexes)
    detail = f"the schema is at version {recorded}, this code needs version {code}"
    if present:
        table = store.dialect.t_schema
        newer = list(range(recorded + 1, code + 1))  # versions are 1 to N, none missing (in_version_order)
        rows = "; ".join(f"INSERT INTO {table} (version) VALUES ({v})" for v in newer)
        return Check("schema_version", Status.FAIL, detail + f", yet the tables of version {newer[0]}"
                     f"{'' if newer[0] == code else f'-{code}'} are already here: the version row was removed",
                     fix=f"record the versions that are in place: {rows} (`{command('migrate')}` would try to create "
                         "those tables again)", data=data)
    return Check("schema_version", Status.FAIL, detail + " (an upgrade that was not migrated)",
                 fix=f"run `{command('migrate')}` ({same_options()}); workers "
                     "refuse to start until then", data=data)


def _expected_now(ctx: DoctorContext) -> ExpectedSchema:
    """What the recorded version should have put in place (the code's schema if it is current)."""
    if ctx.recorded_version is None or ctx.recorded_version >= ctx.store.dialect.schema_version:
        return ctx.expected
    return expected_schema(ctx.store, ctx.recorded_version)


def _drift(ctx: DoctorContext) -> Drift:
    """The live schema against what the recorded version should have put in place, found once
    and kept on the context (schema_drift words all of it, claim_index reads one index)."""
    if ctx.drift is None:
        assert ctx.live is not None
        ctx.drift = compare(_expected_now(ctx), ctx.live, ignore=ctx.expected)
    return ctx.drift


def schema_drift(ctx: DoctorContext) -> Check:
    live, recorded = ctx.live, ctx.recorded_version
    if live is None or not recorded:
        return _not_checked("schema_drift", "no schema version is recorded")
    if recorded > ctx.store.dialect.schema_version:
        return _not_checked("schema_drift", "the schema is newer than this code knows")
    expected = _expected_now(ctx)
    drift = _drift(ctx)
    data: dict[str, Any] = {
        "version": recorded, "missing_tables": drift.missing_tables,
        "missing_columns": [f"{t}.{c}" for t, c, _ in drift.missing_columns],
        "missing_indexes": drift.missing_indexes, "changed_indexes": [i for i, _ in drift.changed_indexes],
        "extra_tables": drift.extra_tables, "extra_columns": [f"{t}.{c}" for t, c in drift.extra_columns],
        "extra_indexes": [i for i, _ in drift.extra_indexes]}
    extras = ([f"extra table {t} (not errands')" for t in drift.extra_tables]
              + [f"extra column {t}.{c}" for t, c in drift.extra_columns]
              + [f"extra index {i} on {t}" + (" (every enqueue and finished job pays for it)"
                                               if t == ctx.store.dialect.t_jobs else "")
                 for i, t in drift.extra_indexes])
    if not drift.missing:
        detail = (f"tables, columns and indexes match errands' DDL for version {recorded} "
                  f"({len(expected.tables)} tables, {len(expected.indexes)} indexes)")
        status = Status.INFO if extras else Status.OK
        return Check("schema_drift", status, detail + ("; also found:" if extras else ""), items=tuple(extras),
                     data=data)
    items: list[str] = []
    fixes: list[str] = []
    for table in drift.missing_tables:
        items.append(f"table {table} is missing")
        fixes.append(f"create {table} with its CREATE TABLE statement from `{command('migrate', '--sql')}`")
    for table, column, definition in drift.missing_columns:
        items.append(f"column {table}.{column} is missing")
        fixes.append(f"ALTER TABLE {table} ADD COLUMN {definition}")
    for name in drift.missing_indexes:
        items.append(f"index {name} on {expected.indexes[name].spec.table} is missing")
        fixes.append(expected.indexes[name].statement)
    for name, why in drift.changed_indexes:
        items.append(f"index {name} {why}")
        fixes.append(f"drop index {name}, then: {expected.indexes[name].statement}")
    count = len(items)
    return Check("schema_drift", Status.FAIL, f"{count} difference{'s' if count > 1 else ''} from errands' DDL for "
                 f"version {recorded}", items=tuple(items + extras),
                 fix=f"`{command('migrate')}` does not redo a version it has recorded, so restore these by hand:\n"
                     + "\n".join(fixes), data=data)


def claim_index(ctx: DoctorContext, facts: DialectFacts) -> Check:
    """The index the claim query needs, as errands defines it, and whether the planner uses it."""
    store = ctx.store
    name = store.dialect.claim_index_name
    expected = _expected_now(ctx).indexes[name]
    drift = _drift(ctx)
    data: dict[str, Any] = {"index": name, "present": name not in drift.missing_indexes}
    if name in drift.missing_indexes:
        return Check("claim_index", Status.FAIL, f"the claim index {name} is missing: every claim reads and sorts "
                     "all ready jobs of its queue", fix=expected.statement, data=data)
    changed = dict(drift.changed_indexes).get(name)
    if changed is not None:
        return Check("claim_index", Status.FAIL, f"{name} is not the index errands defines ({changed}): claims "
                     "cannot walk it in order", fix=f"drop index {name}, then: {expected.statement}", data=data)
    queue = ctx.app.default_queue

    def read(cur: Any) -> tuple[str, int]:
        plan = store.jobs.explain_claim_in(cur, queue, 10)
        cur.execute(store.dialect.q("SELECT COUNT(*) FROM (SELECT 1 FROM {jobs} LIMIT {p}) AS capped"),
                    (PLAN_MATTERS_FROM_ROWS,))
        return plan, int(cur.fetchone()[0])

    plan, rows = ctx.read(read)
    data.update(plan=plan, used=name in plan, rows_capped=rows)
    if name in plan:
        return Check("claim_index", Status.OK, f"{name} is in place and the claim query uses it", data=data)
    if rows < PLAN_MATTERS_FROM_ROWS:
        return Check("claim_index", Status.INFO, f"{name} is in place; with {rows} jobs the planner reads the "
                     "table instead, which is as quick at this size (it switches as the table grows)", data=data)
    return Check("claim_index", Status.WARN, f"{name} is in place but the claim query does not use it with "
                 f"{PLAN_MATTERS_FROM_ROWS}+ jobs: claims slow down as the queue grows",
                 fix=f"refresh the planner's statistics ({store.dialect.q(facts.ANALYZE)}) and run "
                     f"`{command('doctor')}` again",
                 data=data)


# ---------------------------------------------------------------------- clock
def clock_skew(ctx: DoctorContext, samples: int = 3) -> Check:
    """The database clock minus this host's, from the reading with the shortest round trip
    (its midpoint is when the database most likely read its clock)."""
    store = ctx.store

    def read(cur: Any) -> tuple[float, float, float]:
        before = time.time()
        value = store.db.now_in(cur)
        after = time.time()
        return before, value.timestamp(), after

    before, db, after = min((ctx.read(read) for _ in range(samples)), key=lambda r: r[2] - r[0])
    skew, error = db - (before + after) / 2, (after - before) / 2
    data = {"skew_seconds": round(skew, 4), "uncertainty_seconds": round(error, 4),
            "database_time": round(db, 3), "host_time": round((before + after) / 2, 3)}
    way = "ahead of" if skew >= 0 else "behind"
    detail = f"the database clock is {abs(skew):.3f} s {way} this host's (+/- {error:.3f} s)"
    if store.dialect.name == "sqlite":
        return Check("clock_skew", Status.OK, detail + ": SQLite reads this host's clock", data=data)
    if abs(skew) - error > SKEW_WARN_SECONDS:
        return Check("clock_skew", Status.WARN, detail + ". errands schedules by the database clock, so jobs still "
                     "run in order; what skews: run_at times your code computes from this host's clock, this "
                     "host's log timestamps against times in `errands status` and the dashboard, and the periodic "
                     "scheduler, which re-measures the offset only once a minute",
                     fix="synchronise this host's clock (and the database server's) with NTP "
                         "(chrony, systemd-timesyncd)", data=data)
    return Check("clock_skew", Status.OK, detail, data=data)


# ---------------------------------------------------------------------- workers
def workers(ctx: DoctorContext) -> Check:
    """The worker registry: who is alive, who stopped heart-beating, and whether ready jobs wait
    for a worker that is not there."""
    app, store = ctx.app, ctx.store
    now = store.now()
    registry = workers_view(app, now)
    counts = store.jobs.counts()
    ready = {q: c.ready for q, c in counts.items() if c.ready}
    alive = [w for w in registry if w["alive"]]
    stale = [w for w in registry if not w["alive"]]
    # Each worker is judged by its own lease (recorded at registration); rows without one by ours.
    limits = sorted({w["alive_within"] for w in registry}) or [alive_within(app.lease, app.lease)]
    limit = limits[-1]
    within = f"{limit:.0f} s" if len(limits) == 1 else f"{limits[0]:.0f}-{limit:.0f} s, each its own lease"
    items = tuple(
        f"{w['id']}: {'alive' if w['alive'] else 'STALE'}, queues {','.join(w['queues'])}, concurrency "
        f"{w['concurrency']}, last heartbeat {w['seconds_since_heartbeat']:.1f} s ago (alive within "
        f"{w['alive_within']:g} s), {w['jobs_done']} jobs done, {len(w['current_jobs'])} held now" for w in registry)
    served = {q for w in alive for q in w["queues"]}
    orphaned = sorted(q for q in ready if q not in served)
    data = {"alive": [w["id"] for w in alive], "stale": [w["id"] for w in stale], "ready": ready,
            "unserved_queues": orphaned, "alive_within_seconds": limit,
            "workers": [{k: w[k] for k in ("id", "hostname", "pid", "queues", "last_heartbeat_at",
                                           "seconds_since_heartbeat", "alive", "lease", "alive_within")}
                        for w in registry]}
    start = f"start workers: {command('worker', app=True)} (as a service that restarts it)"
    if not alive and ready:
        waiting = sum(ready.values())
        jobs = "1 job is" if waiting == 1 else f"{waiting} jobs are"
        return Check("workers", Status.FAIL, f"no live worker, and {jobs} ready (in {', '.join(sorted(ready))}): "
                     "nothing runs them", fix=start, items=items, data=data)
    if not alive:
        return Check("workers", Status.WARN, "no live worker (no heartbeat within "
                     f"{within}); no job is ready now, but jobs enqueued meanwhile wait",
                     fix=start, items=items, data=data)
    if orphaned:
        return Check("workers", Status.FAIL, f"ready jobs in {', '.join(orphaned)}, which no live worker takes",
                     fix=f"start a worker for them: {command('worker', '-q ' + ','.join(orphaned), app=True)}",
                     items=items, data=data)
    detail = f"{len(alive)} live worker{'s' if len(alive) != 1 else ''} (heartbeat within {within})"
    if stale:
        return Check("workers", Status.WARN, detail + f"; {len(stale)} stopped heart-beating without unregistering "
                     "(killed, or their host went away)", items=items, data=data,
                     fix="nothing is lost: their jobs return to the queue when their leases expire (`"
                         f"{command('recover')}` does it now), and live workers remove such rows after "
                         f"{forget_worker_after(app.lease):.0f} s of silence; if they should be running, restart "
                         "them")
    return Check("workers", Status.OK, detail, items=items, data=data)
