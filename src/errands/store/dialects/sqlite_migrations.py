"""SQLite's schema, version by version: the statements ``errands migrate`` runs (and SQLite runs
by itself on first use), each version in one ``BEGIN IMMEDIATE`` transaction.

Versions are listed in order at the bottom (:data:`MIGRATIONS`); the dialect's schema version is
the last of them.  A change to the schema is a new version appended here and, with the same
number, in ``postgres_migrations`` and ``mysql_migrations``; a version that has shipped is never
edited, because a database that recorded it never runs it again.
"""

from __future__ import annotations

from ...core import wire
from .base import Dialect, SchemaVersion, Step, in_version_order


def _version_1(d: Dialect) -> list[str | Step]:
    return [d.q(s) for s in (
        "CREATE TABLE IF NOT EXISTS {jobs} ("
        " id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " queue TEXT NOT NULL, name TEXT NOT NULL, payload TEXT NOT NULL,"
        " priority INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,"
        " max_attempts INTEGER NOT NULL, timeout REAL,"
        " available_at REAL NOT NULL, created_at REAL NOT NULL,"
        " reserved_by TEXT, reserved_at REAL, reserved_until REAL, last_error TEXT)",
        # The claim query: ready jobs of one queue, by priority then age.
        "CREATE INDEX IF NOT EXISTS {jobs}_claim ON {jobs} (queue, priority DESC, id) "
        "WHERE reserved_by IS NULL",
        # Heartbeat and stale recovery look at reserved rows only.
        "CREATE INDEX IF NOT EXISTS {jobs}_lease ON {jobs} (reserved_until) WHERE reserved_by IS NOT NULL",
        "CREATE TABLE IF NOT EXISTS {failed} ("
        " id INTEGER PRIMARY KEY, queue TEXT NOT NULL, name TEXT NOT NULL, payload TEXT NOT NULL,"
        " priority INTEGER NOT NULL, attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL,"
        " timeout REAL, created_at REAL NOT NULL, failed_at REAL NOT NULL,"
        " error_type TEXT NOT NULL, error_message TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {failed}_queue ON {failed} (queue, failed_at)",
        "CREATE TABLE IF NOT EXISTS {workers} ("
        " id TEXT PRIMARY KEY, hostname TEXT NOT NULL, pid INTEGER NOT NULL, queues TEXT NOT NULL,"
        " concurrency INTEGER NOT NULL, started_at REAL NOT NULL, heartbeat_at REAL NOT NULL,"
        " jobs_done INTEGER NOT NULL DEFAULT 0)",
    )]


def _version_2(d: Dialect) -> list[str | Step]:
    return [d.q(s) for s in (
        *(f"ALTER TABLE {{jobs}} ADD COLUMN {c}" for c in (
            "unique_key TEXT", "blocked_by INTEGER", "batch_id INTEGER", "concurrency_key TEXT",
            "flags INTEGER NOT NULL DEFAULT 0", "cancel_requested_at REAL", "admitted_at REAL",
            "progress REAL", "progress_message TEXT")),
        *(f"ALTER TABLE {{failed}} ADD COLUMN {c}" for c in (
            "unique_key TEXT", "batch_id INTEGER", "concurrency_key TEXT", "flags INTEGER NOT NULL DEFAULT 0")),
        # Blocked jobs leave the claim index, so a long chain never slows claims down.
        "DROP INDEX IF EXISTS {jobs}_claim",
        "CREATE INDEX {jobs}_claim ON {jobs} (queue, priority DESC, id) "
        "WHERE reserved_by IS NULL AND blocked_by IS NULL",
        # Side tables instead of indexes on the jobs table: a plain job writes no row in them.
        "CREATE TABLE {unique_keys} (name TEXT PRIMARY KEY, job_id INTEGER NOT NULL)",
        "CREATE TABLE {dependencies} (parent_id INTEGER NOT NULL, child_id INTEGER NOT NULL,"
        " PRIMARY KEY (parent_id, child_id))",
        "CREATE TABLE {group_runs} (job_id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
        "CREATE INDEX {group_runs}_name ON {group_runs} (name)",
        "CREATE TABLE {results} (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, name TEXT NOT NULL,"
        " state TEXT NOT NULL, result TEXT, message TEXT, attempts INTEGER NOT NULL, batch_id INTEGER,"
        " finished_at REAL NOT NULL, expires_at REAL NOT NULL)",
        "CREATE INDEX {results}_expiry ON {results} (expires_at)",
        "CREATE INDEX {results}_batch ON {results} (batch_id) WHERE batch_id IS NOT NULL",
        "CREATE TABLE {batches} (id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,"
        " total INTEGER NOT NULL, done INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,"
        " on_complete TEXT, on_failure TEXT, created_at REAL NOT NULL, completed_at REAL,"
        " failure_fired_at REAL)",
        "CREATE TABLE {locks} (name TEXT PRIMARY KEY)",
        "CREATE TABLE {rate_starts} (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,"
        " started_at REAL NOT NULL)",
        "CREATE INDEX {rate_starts}_window ON {rate_starts} (name, started_at)",
        "CREATE TABLE {periodic} (name TEXT PRIMARY KEY, last_slot REAL, updated_at REAL NOT NULL)",
        "CREATE TABLE {queues} (name TEXT PRIMARY KEY, paused INTEGER NOT NULL DEFAULT 0,"
        " changed_at REAL NOT NULL)",
        "CREATE INDEX {failed}_failed_at ON {failed} (failed_at)",
    )]


def _version_3(d: Dialect) -> list[str | Step]:
    return [d.q(s) for s in (
        "CREATE TABLE {users} (id INTEGER PRIMARY KEY AUTOINCREMENT, username TEXT NOT NULL UNIQUE,"
        " password_hash TEXT NOT NULL, role TEXT NOT NULL, disabled INTEGER NOT NULL DEFAULT 0,"
        " theme TEXT NOT NULL DEFAULT 'auto', created_at REAL NOT NULL, last_login_at REAL)",
        "CREATE TABLE {sessions} (token_hash TEXT PRIMARY KEY, user_id INTEGER NOT NULL, csrf TEXT NOT NULL,"
        " created_at REAL NOT NULL, expires_at REAL NOT NULL)",
        "CREATE INDEX {sessions}_user ON {sessions} (user_id)",
        "CREATE TABLE {remember} (selector TEXT PRIMARY KEY, validator_hash TEXT NOT NULL,"
        " user_id INTEGER NOT NULL, expires_at REAL NOT NULL)",
        "CREATE TABLE {login_attempts} (id INTEGER PRIMARY KEY AUTOINCREMENT, username TEXT NOT NULL,"
        " ip TEXT NOT NULL, at REAL NOT NULL, ok INTEGER NOT NULL)",
        "CREATE INDEX {login_attempts}_user ON {login_attempts} (username, at)",
        "CREATE INDEX {login_attempts}_ip ON {login_attempts} (ip, at)",
        "CREATE TABLE {audit} (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT NOT NULL,"
        " action TEXT NOT NULL, target TEXT NOT NULL, detail TEXT)",
        # The dashboard lists blocked jobs by id; partial, so plain jobs never touch it.
        "CREATE INDEX IF NOT EXISTS {jobs}_blocked ON {jobs} (id) WHERE blocked_by IS NOT NULL",
        "CREATE TABLE {stats} (minute REAL NOT NULL, queue TEXT NOT NULL, succeeded INTEGER NOT NULL,"
        " failed INTEGER NOT NULL, PRIMARY KEY (minute, queue))",
    )]


def _version_4(d: Dialect) -> list[str | Step]:
    """Issue 14: labels, rate-limit costs, unique periods, the error history.  Nullable columns
    and a new side table only, so it runs on a populated database without rewriting a row."""
    return [d.q(s) for s in (
        "ALTER TABLE {jobs} ADD COLUMN label TEXT",
        "ALTER TABLE {jobs} ADD COLUMN cost INTEGER",
        "ALTER TABLE {failed} ADD COLUMN label TEXT",
        "ALTER TABLE {failed} ADD COLUMN cost INTEGER",
        "ALTER TABLE {results} ADD COLUMN label TEXT",
        "ALTER TABLE {unique_keys} ADD COLUMN period REAL",
        "ALTER TABLE {unique_keys} ADD COLUMN expires_at REAL",
        "ALTER TABLE {rate_starts} ADD COLUMN units INTEGER",
        # One row per failed attempt, keyed by job id: a plain successful job writes none.
        "CREATE TABLE {job_errors} (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL,"
        " attempt INTEGER NOT NULL, failed_at REAL NOT NULL, error_type TEXT NOT NULL,"
        " error_message TEXT NOT NULL, traceback TEXT)",
        "CREATE INDEX {job_errors}_job ON {job_errors} (job_id, id)",
    )]


def _version_5(d: Dialect) -> list[str | Step]:
    """Workflows: a job may wait for several others (``blocked_by`` now counts them; each old
    row waited for one), and a workflow's steps keep their graph and result inputs."""
    return [d.q(s) for s in (
        "UPDATE {jobs} SET blocked_by = 1 WHERE blocked_by IS NOT NULL",
        "ALTER TABLE {batches} ADD COLUMN name TEXT",
        "ALTER TABLE {batches} ADD COLUMN policy TEXT",
        "ALTER TABLE {batches} ADD COLUMN result_ttl REAL",
        "CREATE TABLE {steps} (job_id INTEGER PRIMARY KEY, batch_id INTEGER NOT NULL,"
        " position INTEGER NOT NULL, label TEXT NOT NULL, parents TEXT NOT NULL, inputs TEXT)",
        "CREATE INDEX {steps}_batch ON {steps} (batch_id, position)",
    )]


def _version_6(d: Dialect) -> list[str | Step]:
    # How often the job snoozed (raise Snooze): capped by its max_snoozes; never read by a claim.
    return [d.q("ALTER TABLE {jobs} ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0")]


def _version_7(d: Dialect) -> list[str | Step]:
    # Each worker's own lease and heartbeat interval: liveness is judged by them (NULL: a worker
    # of an errands that did not record them, judged by the reader's lease as before).
    return [d.q("ALTER TABLE {workers} ADD COLUMN lease REAL"),
            d.q("ALTER TABLE {workers} ADD COLUMN heartbeat_every REAL")]


def _version_8(d: Dialect) -> list[str | Step]:
    # Limits per queue that operators set from the dashboard; workers read them every few seconds.
    return [d.q("CREATE TABLE {queue_limits} (name TEXT PRIMARY KEY, concurrency INTEGER, rate_count INTEGER,"
                " rate_period REAL, changed_at REAL NOT NULL)")]


def _version_9(d: Dialect) -> list[str | Step]:
    # Alert thresholds: whether each alert is crossed, changed by conditional UPDATEs (one deliverer).
    return [d.q("CREATE TABLE IF NOT EXISTS {alerts} (kind TEXT NOT NULL, subject TEXT NOT NULL,"
                " crossed INTEGER NOT NULL DEFAULT 0, value REAL, threshold REAL, changed_at REAL,"
                " checked_at REAL, PRIMARY KEY (kind, subject))")]


def _version_10(d: Dialect) -> list[str | Step]:
    # Issue 25: when a job expires unstarted, its deadline across retries, its rate-limit key, aging.
    # Nullable columns that a plain job leaves NULL (no table rewrite).
    steps: list[str | Step] = [*d.add_job_column("expires_at"), *d.add_job_column("deadline_at"),
                               *d.add_job_column("rate_key"), *d.add_job_column("age_after"),
                               *d.add_job_column("age_base"), *d.add_job_column("age_cap")]
    # Per-key rate limits: when each start leaves its window, so the prune deletes passed windows
    # (the keys that fell idle) a bounded number at a time, through this index.
    steps += [d.q("ALTER TABLE {rate_starts} ADD COLUMN expires_at REAL"),
              d.q("CREATE INDEX IF NOT EXISTS {rate_starts}_expiry ON {rate_starts} (expires_at)")]
    # Aging: the waiting jobs that still age, by due time (the pass reads only these).
    steps.append(d.q("CREATE INDEX IF NOT EXISTS {jobs}_aging ON {jobs} (available_at) WHERE age_cap IS NOT NULL"))
    # The maintenance pass finds the waiting jobs past their expiry or deadline through these;
    # partial, so a plain job (both NULL) adds no entry.
    steps += [d.q("CREATE INDEX IF NOT EXISTS {jobs}_expiry ON {jobs} (expires_at) WHERE expires_at IS NOT NULL"),
              d.q("CREATE INDEX IF NOT EXISTS {jobs}_deadline ON {jobs} (deadline_at) WHERE deadline_at IS NOT NULL")]
    steps += _fairness(d)
    return steps


def _fairness(d: Dialect) -> list[str | Step]:
    """Fairness between keys (issue 25): each job's key and turn (0 for a job without a key), the claim
    index ordered by turn after priority (the claim's order is priority, turn, id), and each key's
    counter of turns handed out per queue."""
    return [*d.add_job_column("fairness_key"), *d.add_job_column("fair_turn"), *(d.q(s) for s in (
        "DROP INDEX IF EXISTS {jobs}_claim",
        "CREATE INDEX {jobs}_claim ON {jobs} (queue, priority DESC, fair_turn, id) "
        "WHERE reserved_by IS NULL AND blocked_by IS NULL",
        "CREATE TABLE IF NOT EXISTS {fair_keys} (queue TEXT NOT NULL, name TEXT NOT NULL,"
        " turn INTEGER NOT NULL DEFAULT 0, used_at REAL NOT NULL, PRIMARY KEY (queue, name))",
        # The highest turn of a queue (where a key starts when no keyed job waits): one index probe.
        "CREATE INDEX IF NOT EXISTS {fair_keys}_turn ON {fair_keys} (queue, turn)",
    ))]


# Issue 27, operating a running fleet: version 11 is made of one section per part, each owned by
# that part (sections are kept apart so the parts' changes never touch each other's lines).


def _version_11(d: Dialect) -> list[str | Step]:
    return [*_dynamic_schedules(d), *_worker_commands(d), *_checkpoints(d), *_run_logs(d), *_sql_enqueue(d)]


def _dynamic_schedules(d: Dialect) -> list[str | Step]:
    """Schedules stored in the database beside the code's (part 1): one row per schedule, its
    ``version`` bumped by every change; ``{periodic}.version`` repeats it, so that a scheduler's claim of
    a slot (a conditional UPDATE of that row) succeeds only under the definition it read."""
    return [d.q(s) for s in (
        "CREATE TABLE IF NOT EXISTS {schedules} (name TEXT PRIMARY KEY, job TEXT NOT NULL, cron TEXT NOT NULL,"
        " timezone TEXT, payload TEXT NOT NULL, queue TEXT, priority INTEGER,"
        " catch_up TEXT NOT NULL DEFAULT 'latest', catch_up_limit INTEGER, paused INTEGER NOT NULL DEFAULT 0,"
        " version INTEGER NOT NULL DEFAULT 1, created_at REAL NOT NULL, updated_at REAL NOT NULL)",
        "ALTER TABLE {periodic} ADD COLUMN version INTEGER",
    )]


def _worker_commands(d: Dialect) -> list[str | Step]:
    """A worker process quieted or stopped from outside, read with its heartbeat (part 2): ``command``
    is what an operator asked of it ('quiet', 'stop'; NULL: run), ``status`` what it reports doing
    ('quiet', 'stopping'; NULL: running).  Both nullable: no table rewrite."""
    return [d.q("ALTER TABLE {workers} ADD COLUMN command TEXT"),
            d.q("ALTER TABLE {workers} ADD COLUMN status TEXT")]


def _checkpoints(d: Dialect) -> list[str | Step]:
    """A long job's checkpoint and its resumptions (part 3): the JSON a handler stored with
    ``current_job().checkpoint(value)``, kept by the dead letter (a retry from there resumes from it),
    and how often a stopping worker gave the job back from it (against ``max_resumptions``)."""
    return [*d.add_job_column("checkpoint"), *d.add_job_column("resumptions")]


def _run_logs(d: Dialect) -> list[str | Step]:
    """The log records each attempt emitted (part 4): one row per attempt that logged and whose job
    keeps a record (waiting, dead, or with a kept result), its records as one JSON array."""
    return [d.q(s) for s in (
        "CREATE TABLE {run_logs} (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL,"
        " attempt INTEGER NOT NULL, worker TEXT, logged_at REAL NOT NULL, dropped INTEGER NOT NULL,"
        " records TEXT NOT NULL)",
        "CREATE INDEX {run_logs}_job ON {run_logs} (job_id, id)",
    )]


_WALL_CLOCK = "((julianday('now') - 2440587.5) * 86400.0)"
"""SQLite's own clock in seconds (the dialect's NOW): a trigger runs on any connection, also one
without the ``errands_now()`` function a store with its own clock (the pytest plugin's) registers."""


def _sql_enqueue(d: Dialect) -> list[str | Step]:
    """Enqueue from SQL (part 5): a view ``<prefix>enqueue`` whose ``INSTEAD OF INSERT`` trigger
    checks the row and stores the job (docs/wire-format.md; :mod:`errands.core.wire`), so the
    ``sqlite3`` shell, any language's driver, or a trigger on the user's own tables enqueues with
    ``INSERT INTO errands_enqueue (name, args, ...) VALUES (...)``.  A column left out or NULL takes
    its default.  A unique key is honoured as the Python enqueue's default rule does
    (``Steps.insert_unique``): a holder that waits or runs, or ended less than its unique period ago,
    keeps it and nothing is stored; a key whose job is gone is taken over.  SQLite has one writer,
    so the statements of one trigger never race another enqueue.  Workers notice the new row through
    ``PRAGMA data_version`` and the highest id, as they notice any other enqueue."""
    view = d.prefix + wire.ENTRY_POINT
    columns = ", ".join(f"NULL AS {p.name}" for p in wire.PARAMETERS)
    r = {k: f"{view}: {v}".replace("'", "''") for k, v in wire.REFUSALS.items()}
    delay_max = f"{wire.DELAY_MAX:.0f}"

    def number(expr: str) -> str:
        return f"typeof({expr}) NOT IN ('integer', 'real')"

    checks = (
        ("name", f"typeof(NEW.name) <> 'text' OR length(NEW.name) NOT BETWEEN 1 AND {wire.NAME_MAX}"),
        ("args", "NEW.args IS NOT NULL AND (CASE WHEN json_valid(NEW.args) THEN json_type(NEW.args) END)"
                 " IS NOT 'array'"),
        ("kwargs", "NEW.kwargs IS NOT NULL AND (CASE WHEN json_valid(NEW.kwargs) THEN json_type(NEW.kwargs) END)"
                   " IS NOT 'object'"),
        ("queue", f"NEW.queue IS NOT NULL AND (typeof(NEW.queue) <> 'text' OR length(NEW.queue) NOT BETWEEN 1 AND"
                  f" {wire.QUEUE_MAX} OR NEW.queue GLOB '*[^A-Za-z0-9._-]*' OR NEW.queue IN ('.', '..'))"),
        ("priority", f"NEW.priority IS NOT NULL AND (typeof(NEW.priority) <> 'integer' OR NEW.priority NOT BETWEEN"
                     f" {wire.MIN_PRIORITY} AND {wire.MAX_PRIORITY})"),
        ("delay", f"NEW.delay IS NOT NULL AND ({number('NEW.delay')} OR NOT (NEW.delay BETWEEN 0 AND {delay_max}))"),
        ("unique_key", f"NEW.unique_key IS NOT NULL AND (typeof(NEW.unique_key) <> 'text' OR length(NEW.unique_key)"
                       f" NOT BETWEEN 1 AND {wire.KEY_MAX})"),
        ("max_attempts", "NEW.max_attempts IS NOT NULL AND (typeof(NEW.max_attempts) <> 'integer' OR"
                         f" NEW.max_attempts NOT BETWEEN 1 AND {wire.ATTEMPTS_MAX})"),
        ("timeout", f"NEW.timeout IS NOT NULL AND ({number('NEW.timeout')} OR NOT (NEW.timeout > 0 AND"
                    f" NEW.timeout <= {delay_max}))"),
    )
    free = "NEW.unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM {unique_keys} WHERE name = NEW.unique_key)"
    body = [f"SELECT RAISE(ABORT, '{r[what]}') WHERE {condition};" for what, condition in checks]
    body += [
        # A key whose job is gone (and whose unique period, if any, is over) is free again.
        "DELETE FROM {unique_keys} WHERE NEW.unique_key IS NOT NULL AND name = NEW.unique_key"
        f" AND NOT COALESCE(expires_at > {_WALL_CLOCK}, 0)"
        " AND NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = {unique_keys}.job_id);",
        "INSERT INTO {jobs} (queue, name, payload, priority, attempts, max_attempts, timeout, available_at,"
        " created_at, unique_key) SELECT"
        f" COALESCE(NEW.queue, '{wire.DEFAULT_QUEUE}'), NEW.name,"
        " json_object('args', json(COALESCE(NEW.args, '[]')), 'kwargs', json(COALESCE(NEW.kwargs, '{{}}'))),"
        f" COALESCE(NEW.priority, 0), 0, COALESCE(NEW.max_attempts, {wire.DEFAULT_MAX_ATTEMPTS}), NEW.timeout,"
        f" {_WALL_CLOCK} + COALESCE(NEW.delay, 0), {_WALL_CLOCK}, NEW.unique_key WHERE {free};",
        # The job just stored holds the key (last_insert_rowid() is the trigger's own last insert).
        "INSERT INTO {unique_keys} (name, job_id, period) SELECT NEW.unique_key, last_insert_rowid(), NULL"
        " WHERE NEW.unique_key IS NOT NULL"
        " AND NOT EXISTS (SELECT 1 FROM {unique_keys} WHERE name = NEW.unique_key);",
    ]
    return [d.q(s) for s in (
        f"CREATE VIEW IF NOT EXISTS {view} AS SELECT {columns} WHERE 0",
        f"CREATE TRIGGER IF NOT EXISTS {view}_insert INSTEAD OF INSERT ON {view} BEGIN\n"
        + "\n".join(body) + "\nEND",
    )]


# Issue 29, what a job costs the database: version 12 is made of one section per part, each owned by
# that part (sections are kept apart so the parts' changes never touch each other's lines).


def _version_12(d: Dialect) -> list[str | Step]:
    return [*_room_for_the_lease_update(d)]


def _room_for_the_lease_update(d: Dialect) -> list[str | Step]:
    # PostgreSQL leaves half of each jobs page free for the claim's new row versions (fillfactor).
    # SQLite rewrites the row in place in its B-tree and has no fillfactor: nothing to do.
    return []


MIGRATIONS = in_version_order(
    SchemaVersion(1, "the jobs table with its claim and lease indexes, the dead letter, the workers registry",
                  _version_1),
    SchemaVersion(2, "features: unique keys, dependencies, batches, limits, results, schedules, paused queues",
                  _version_2),
    SchemaVersion(3, "the dashboard's tables (users, sessions, remember-me tokens, login attempts, audit, stats) "
                  "and the blocked jobs' index", _version_3),
    SchemaVersion(4, "labels, rate-limit costs, unique periods, the error history (issue 14)", _version_4),
    SchemaVersion(5, "workflows: dependency counts, batch names and policies, the steps table", _version_5),
    SchemaVersion(6, "how often each job snoozed", _version_6),
    SchemaVersion(7, "each worker's own lease and heartbeat interval", _version_7),
    SchemaVersion(8, "limits per queue, set from the dashboard", _version_8),
    SchemaVersion(9, "the alerts table: whether each alert threshold is crossed", _version_9),
    SchemaVersion(10, "expiry, deadlines across retries, per-key rate limits, priority aging, fairness between keys "
                      "(issue 25)", _version_10),
    SchemaVersion(11, "operating a running fleet: dynamic schedules, worker commands, checkpoints, per-run logs, "
                      "enqueue from SQL (issue 27)", _version_11),
    SchemaVersion(12, "what a job costs the database (issue 29): room on each page of the jobs table for the "
                      "lease UPDATE", _version_12),
)
