"""PostgreSQL's schema, version by version: the statements ``errands migrate`` runs, each version
in one transaction under ``pg_advisory_xact_lock`` (DDL is transactional here).

Versions are listed in order at the bottom (:data:`MIGRATIONS`); the dialect's schema version is
the last of them.  A change to the schema is a new version appended here and, with the same
number, in ``sqlite_migrations`` and ``mysql_migrations``; a version that has shipped is never
edited, because a database that recorded it never runs it again.  ``IF NOT EXISTS`` everywhere
lets a version meet objects a DBA created from ``errands migrate --sql`` beforehand.
"""

from __future__ import annotations

from ...core import wire
from .base import Dialect, SchemaVersion, Step, in_version_order


def _version_1(d: Dialect) -> list[str | Step]:
    return [d.q(s) for s in (
        "CREATE TABLE IF NOT EXISTS {jobs} ("
        " id BIGSERIAL PRIMARY KEY,"
        " queue VARCHAR(60) NOT NULL, name VARCHAR(255) NOT NULL, payload TEXT NOT NULL,"
        " priority INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,"
        " max_attempts INTEGER NOT NULL, timeout DOUBLE PRECISION,"
        " available_at TIMESTAMPTZ NOT NULL, created_at TIMESTAMPTZ NOT NULL,"
        " reserved_by VARCHAR(120), reserved_at TIMESTAMPTZ, reserved_until TIMESTAMPTZ, last_error TEXT)"
        # A queue table churns: every job is inserted, updated and deleted.  Dead row versions
        # left in the claim index make every claim walk them, so vacuum this small hot table
        # early and unthrottled instead of waiting for 20 % of it to be dead (the default).
        " WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,"
        " autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)",
        "CREATE INDEX IF NOT EXISTS {jobs}_claim ON {jobs} (queue, priority DESC, id) "
        "WHERE reserved_by IS NULL",
        "CREATE INDEX IF NOT EXISTS {jobs}_lease ON {jobs} (reserved_until) WHERE reserved_by IS NOT NULL",
        "CREATE TABLE IF NOT EXISTS {failed} ("
        " id BIGINT PRIMARY KEY, queue VARCHAR(60) NOT NULL, name VARCHAR(255) NOT NULL, payload TEXT NOT NULL,"
        " priority INTEGER NOT NULL, attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL,"
        " timeout DOUBLE PRECISION, created_at TIMESTAMPTZ NOT NULL, failed_at TIMESTAMPTZ NOT NULL,"
        " error_type VARCHAR(255) NOT NULL, error_message TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {failed}_queue ON {failed} (queue, failed_at)",
        "CREATE TABLE IF NOT EXISTS {workers} ("
        " id VARCHAR(120) PRIMARY KEY, hostname VARCHAR(255) NOT NULL, pid INTEGER NOT NULL,"
        " queues TEXT NOT NULL, concurrency INTEGER NOT NULL, started_at TIMESTAMPTZ NOT NULL,"
        " heartbeat_at TIMESTAMPTZ NOT NULL, jobs_done BIGINT NOT NULL DEFAULT 0)",
    )]


def _version_2(d: Dialect) -> list[str | Step]:
    return [d.q(s) for s in (
        "ALTER TABLE {jobs} " + ", ".join(f"ADD COLUMN IF NOT EXISTS {c}" for c in (
            "unique_key VARCHAR(255)", "blocked_by BIGINT", "batch_id BIGINT", "concurrency_key VARCHAR(255)",
            "flags INTEGER NOT NULL DEFAULT 0", "cancel_requested_at TIMESTAMPTZ", "admitted_at TIMESTAMPTZ",
            "progress DOUBLE PRECISION", "progress_message VARCHAR(255)")),
        "ALTER TABLE {failed} " + ", ".join(f"ADD COLUMN IF NOT EXISTS {c}" for c in (
            "unique_key VARCHAR(255)", "batch_id BIGINT", "concurrency_key VARCHAR(255)",
            "flags INTEGER NOT NULL DEFAULT 0")),
        # Blocked jobs leave the claim index, so a long chain never slows claims down.
        "DROP INDEX IF EXISTS {jobs}_claim",
        "CREATE INDEX {jobs}_claim ON {jobs} (queue, priority DESC, id) "
        "WHERE reserved_by IS NULL AND blocked_by IS NULL",
        # Side tables instead of indexes on the jobs table: a plain job writes no row in them.
        "CREATE TABLE IF NOT EXISTS {unique_keys} (name VARCHAR(255) PRIMARY KEY, job_id BIGINT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {dependencies} (parent_id BIGINT NOT NULL, child_id BIGINT NOT NULL,"
        " PRIMARY KEY (parent_id, child_id))",
        "CREATE TABLE IF NOT EXISTS {group_runs} (job_id BIGINT PRIMARY KEY, name VARCHAR(255) NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {group_runs}_name ON {group_runs} (name)",
        "CREATE TABLE IF NOT EXISTS {results} (id BIGINT PRIMARY KEY, queue VARCHAR(60) NOT NULL,"
        " name VARCHAR(255) NOT NULL, state VARCHAR(20) NOT NULL, result TEXT, message TEXT,"
        " attempts INTEGER NOT NULL, batch_id BIGINT, finished_at TIMESTAMPTZ NOT NULL,"
        " expires_at TIMESTAMPTZ NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {results}_expiry ON {results} (expires_at)",
        "CREATE INDEX IF NOT EXISTS {results}_batch ON {results} (batch_id) WHERE batch_id IS NOT NULL",
        "CREATE TABLE IF NOT EXISTS {batches} (id BIGSERIAL PRIMARY KEY, kind VARCHAR(10) NOT NULL,"
        " total INTEGER NOT NULL, done INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,"
        " on_complete TEXT, on_failure TEXT, created_at TIMESTAMPTZ NOT NULL, completed_at TIMESTAMPTZ,"
        " failure_fired_at TIMESTAMPTZ)",
        "CREATE TABLE IF NOT EXISTS {locks} (name VARCHAR(255) PRIMARY KEY)",
        "CREATE TABLE IF NOT EXISTS {rate_starts} (id BIGSERIAL PRIMARY KEY, name VARCHAR(255) NOT NULL,"
        " started_at TIMESTAMPTZ NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {rate_starts}_window ON {rate_starts} (name, started_at)",
        "CREATE TABLE IF NOT EXISTS {periodic} (name VARCHAR(255) PRIMARY KEY, last_slot TIMESTAMPTZ,"
        " updated_at TIMESTAMPTZ NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {queues} (name VARCHAR(60) PRIMARY KEY, paused INTEGER NOT NULL DEFAULT 0,"
        " changed_at TIMESTAMPTZ NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {failed}_failed_at ON {failed} (failed_at)",
    )]


def _version_3(d: Dialect) -> list[str | Step]:
    return [d.q(s) for s in (
        "CREATE TABLE IF NOT EXISTS {users} (id BIGSERIAL PRIMARY KEY, username VARCHAR(100) NOT NULL UNIQUE,"
        " password_hash VARCHAR(255) NOT NULL, role VARCHAR(20) NOT NULL, disabled INTEGER NOT NULL DEFAULT 0,"
        " theme VARCHAR(10) NOT NULL DEFAULT 'auto', created_at TIMESTAMPTZ NOT NULL, last_login_at TIMESTAMPTZ)",
        "CREATE TABLE IF NOT EXISTS {sessions} (token_hash VARCHAR(64) PRIMARY KEY, user_id BIGINT NOT NULL,"
        " csrf VARCHAR(64) NOT NULL, created_at TIMESTAMPTZ NOT NULL, expires_at TIMESTAMPTZ NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {sessions}_user ON {sessions} (user_id)",
        "CREATE TABLE IF NOT EXISTS {remember} (selector VARCHAR(32) PRIMARY KEY,"
        " validator_hash VARCHAR(64) NOT NULL, user_id BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {login_attempts} (id BIGSERIAL PRIMARY KEY, username VARCHAR(100) NOT NULL,"
        " ip VARCHAR(64) NOT NULL, at TIMESTAMPTZ NOT NULL, ok INTEGER NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {login_attempts}_user ON {login_attempts} (username, at)",
        "CREATE INDEX IF NOT EXISTS {login_attempts}_ip ON {login_attempts} (ip, at)",
        "CREATE TABLE IF NOT EXISTS {audit} (id BIGSERIAL PRIMARY KEY, at TIMESTAMPTZ NOT NULL,"
        " actor VARCHAR(100) NOT NULL, action VARCHAR(50) NOT NULL, target VARCHAR(255) NOT NULL, detail TEXT)",
        # The dashboard lists blocked jobs by id; partial, so plain jobs never touch it.
        "CREATE INDEX IF NOT EXISTS {jobs}_blocked ON {jobs} (id) WHERE blocked_by IS NOT NULL",
        "CREATE TABLE IF NOT EXISTS {stats} (minute TIMESTAMPTZ NOT NULL, queue VARCHAR(60) NOT NULL,"
        " succeeded BIGINT NOT NULL, failed BIGINT NOT NULL, PRIMARY KEY (minute, queue))",
    )]


def _version_4(d: Dialect) -> list[str | Step]:
    """Issue 14: labels, rate-limit costs, unique periods, the error history.  Nullable columns
    (no table rewrite) and a new side table."""
    return [d.q(s) for s in (
        "ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS label VARCHAR(255), ADD COLUMN IF NOT EXISTS cost INTEGER",
        "ALTER TABLE {failed} ADD COLUMN IF NOT EXISTS label VARCHAR(255), "
        "ADD COLUMN IF NOT EXISTS cost INTEGER",
        "ALTER TABLE {results} ADD COLUMN IF NOT EXISTS label VARCHAR(255)",
        "ALTER TABLE {unique_keys} ADD COLUMN IF NOT EXISTS period DOUBLE PRECISION, "
        "ADD COLUMN IF NOT EXISTS expires_at TIMESTAMPTZ",
        "ALTER TABLE {rate_starts} ADD COLUMN IF NOT EXISTS units INTEGER",
        # One row per failed attempt, keyed by job id: a plain successful job writes none.
        "CREATE TABLE IF NOT EXISTS {job_errors} (id BIGSERIAL PRIMARY KEY, job_id BIGINT NOT NULL,"
        " attempt INTEGER NOT NULL, failed_at TIMESTAMPTZ NOT NULL, error_type VARCHAR(255) NOT NULL,"
        " error_message TEXT NOT NULL, traceback TEXT)",
        "CREATE INDEX IF NOT EXISTS {job_errors}_job ON {job_errors} (job_id, id)",
    )]


def _version_5(d: Dialect) -> list[str | Step]:
    """Workflows: a job may wait for several others (``blocked_by`` now counts them; each old
    row waited for one), and a workflow's steps keep their graph and result inputs."""
    return [d.q(s) for s in (
        "UPDATE {jobs} SET blocked_by = 1 WHERE blocked_by IS NOT NULL",
        "ALTER TABLE {batches} ADD COLUMN IF NOT EXISTS name VARCHAR(255),"
        " ADD COLUMN IF NOT EXISTS policy VARCHAR(10), ADD COLUMN IF NOT EXISTS result_ttl DOUBLE PRECISION",
        "CREATE TABLE IF NOT EXISTS {steps} (job_id BIGINT PRIMARY KEY, batch_id BIGINT NOT NULL,"
        " position INTEGER NOT NULL, label VARCHAR(255) NOT NULL, parents TEXT NOT NULL, inputs TEXT)",
        "CREATE INDEX IF NOT EXISTS {steps}_batch ON {steps} (batch_id, position)",
    )]


def _version_6(d: Dialect) -> list[str | Step]:
    # How often the job snoozed (raise Snooze): capped by its max_snoozes; never read by a claim.
    # A constant default: PostgreSQL 11+ adds the column without rewriting the table.
    return [d.q("ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS snoozes INTEGER NOT NULL DEFAULT 0")]


def _version_7(d: Dialect) -> list[str | Step]:
    # Each worker's own lease and heartbeat interval: liveness is judged by them (NULL: a worker
    # of an errands that did not record them, judged by the reader's lease as before).
    return [d.q("ALTER TABLE {workers} ADD COLUMN IF NOT EXISTS lease DOUBLE PRECISION, "
                "ADD COLUMN IF NOT EXISTS heartbeat_every DOUBLE PRECISION")]


def _version_8(d: Dialect) -> list[str | Step]:
    # Limits per queue that operators set from the dashboard; workers read them every few seconds.
    return [d.q("CREATE TABLE IF NOT EXISTS {queue_limits} (name VARCHAR(60) PRIMARY KEY, concurrency INTEGER,"
                " rate_count INTEGER, rate_period DOUBLE PRECISION, changed_at TIMESTAMPTZ NOT NULL)")]


def _version_9(d: Dialect) -> list[str | Step]:
    # Alert thresholds: whether each alert is crossed, changed by conditional UPDATEs (one deliverer).
    return [d.q("CREATE TABLE IF NOT EXISTS {alerts} (kind VARCHAR(20) NOT NULL, subject VARCHAR(60) NOT NULL,"
                " crossed INTEGER NOT NULL DEFAULT 0, value DOUBLE PRECISION, threshold DOUBLE PRECISION,"
                " changed_at TIMESTAMPTZ, checked_at TIMESTAMPTZ, PRIMARY KEY (kind, subject))")]


def _version_10(d: Dialect) -> list[str | Step]:
    # Issue 25: when a job expires unstarted, its deadline across retries, its rate-limit key, aging.
    # Nullable columns that a plain job leaves NULL (no table rewrite).
    steps: list[str | Step] = [*d.add_job_column("expires_at"), *d.add_job_column("deadline_at"),
                               *d.add_job_column("rate_key"), *d.add_job_column("age_after"),
                               *d.add_job_column("age_base"), *d.add_job_column("age_cap")]
    # Per-key rate limits: when each start leaves its window, so the prune deletes passed windows
    # (the keys that fell idle) a bounded number at a time, through this index.
    steps += [d.q("ALTER TABLE {rate_starts} ADD COLUMN IF NOT EXISTS expires_at TIMESTAMPTZ"),
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
    """Fairness between keys (issue 25): each job's key and turn (0 for a job without a key: a constant
    default, so no table rewrite), the claim index ordered by turn after priority (rebuilt: the
    claim's order is priority, turn, id), and each key's counter of turns handed out per queue."""
    return [*d.add_job_column("fairness_key"), *d.add_job_column("fair_turn"), *(d.q(s) for s in (
        "DROP INDEX IF EXISTS {jobs}_claim",
        "CREATE INDEX {jobs}_claim ON {jobs} (queue, priority DESC, fair_turn, id) "
        "WHERE reserved_by IS NULL AND blocked_by IS NULL",
        "CREATE TABLE IF NOT EXISTS {fair_keys} (queue VARCHAR(60) NOT NULL, name VARCHAR(255) NOT NULL,"
        " turn BIGINT NOT NULL DEFAULT 0, used_at TIMESTAMPTZ NOT NULL, PRIMARY KEY (queue, name))",
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
        "CREATE TABLE IF NOT EXISTS {schedules} (name VARCHAR(255) PRIMARY KEY, job VARCHAR(255) NOT NULL,"
        " cron VARCHAR(255) NOT NULL, timezone VARCHAR(64), payload TEXT NOT NULL, queue VARCHAR(60),"
        " priority INTEGER, catch_up VARCHAR(10) NOT NULL DEFAULT 'latest', catch_up_limit INTEGER,"
        " paused INTEGER NOT NULL DEFAULT 0, version BIGINT NOT NULL DEFAULT 1, created_at TIMESTAMPTZ NOT NULL,"
        " updated_at TIMESTAMPTZ NOT NULL)",
        "ALTER TABLE {periodic} ADD COLUMN IF NOT EXISTS version BIGINT",
    )]


def _worker_commands(d: Dialect) -> list[str | Step]:
    """A worker process quieted or stopped from outside, read with its heartbeat (part 2): ``command``
    is what an operator asked of it ('quiet', 'stop'; NULL: run), ``status`` what it reports doing
    ('quiet', 'stopping'; NULL: running).  Both nullable: no table rewrite."""
    return [d.q("ALTER TABLE {workers} ADD COLUMN IF NOT EXISTS command VARCHAR(16), "
                "ADD COLUMN IF NOT EXISTS status VARCHAR(16)")]


def _checkpoints(d: Dialect) -> list[str | Step]:
    """A long job's checkpoint and its resumptions (part 3): the JSON a handler stored with
    ``current_job().checkpoint(value)``, kept by the dead letter (a retry from there resumes from it),
    and how often a stopping worker gave the job back from it (against ``max_resumptions``)."""
    return [*d.add_job_column("checkpoint"), *d.add_job_column("resumptions")]


def _run_logs(d: Dialect) -> list[str | Step]:
    """The log records each attempt emitted (part 4): one row per attempt that logged and whose job
    keeps a record (waiting, dead, or with a kept result), its records as one JSON array."""
    return [d.q(s) for s in (
        "CREATE TABLE IF NOT EXISTS {run_logs} (id BIGSERIAL PRIMARY KEY, job_id BIGINT NOT NULL,"
        " attempt INTEGER NOT NULL, worker VARCHAR(255), logged_at TIMESTAMPTZ NOT NULL,"
        " dropped INTEGER NOT NULL, records TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS {run_logs}_job ON {run_logs} (job_id, id)",
    )]


def _enqueue_checks(name: str) -> tuple[str, ...]:
    """The function's checks of its input: RAISE EXCEPTION with SQLSTATE 22023, :data:`wire.REFUSALS`'
    words, and the value refused in DETAIL."""
    r = {k: f"{name}: {v}".replace("'", "''") for k, v in wire.REFUSALS.items()}
    delay_max = f"{wire.DELAY_MAX:.0f}"
    return (
        f" IF p_name IS NULL OR length(p_name) NOT BETWEEN 1 AND {wire.NAME_MAX} THEN",
        f"  RAISE EXCEPTION '{r['name']}' USING ERRCODE = '22023'; END IF;",
        " p_args := COALESCE(p_args, '[]'); p_kwargs := COALESCE(p_kwargs, '{}');",
        f" IF jsonb_typeof(p_args) <> 'array' THEN RAISE EXCEPTION '{r['args']}'",
        "  USING ERRCODE = '22023', DETAIL = 'got a JSON ' || jsonb_typeof(p_args); END IF;",
        f" IF jsonb_typeof(p_kwargs) <> 'object' THEN RAISE EXCEPTION '{r['kwargs']}'",
        "  USING ERRCODE = '22023', DETAIL = 'got a JSON ' || jsonb_typeof(p_kwargs); END IF;",
        f" IF v_queue !~ '^[A-Za-z0-9._-]{{1,{wire.QUEUE_MAX}}}$' OR v_queue IN ('.', '..') THEN",
        f"  RAISE EXCEPTION '{r['queue']}' USING ERRCODE = '22023', DETAIL = 'got ' || quote_literal(v_queue);",
        " END IF;",
        f" IF NOT (v_delay >= 0 AND v_delay <= {delay_max}) THEN",
        f"  RAISE EXCEPTION '{r['delay']}' USING ERRCODE = '22023', DETAIL = 'got ' || v_delay; END IF;",
        f" IF p_key IS NOT NULL AND length(p_key) NOT BETWEEN 1 AND {wire.KEY_MAX} THEN",
        f"  RAISE EXCEPTION '{r['unique_key']}' USING ERRCODE = '22023'; END IF;",
        f" IF v_priority NOT BETWEEN {wire.MIN_PRIORITY} AND {wire.MAX_PRIORITY} THEN"
        f" RAISE EXCEPTION '{r['priority']}'",
        "  USING ERRCODE = '22023', DETAIL = 'got ' || v_priority; END IF;",
        f" IF v_attempts NOT BETWEEN 1 AND {wire.ATTEMPTS_MAX} THEN RAISE EXCEPTION '{r['max_attempts']}'",
        "  USING ERRCODE = '22023', DETAIL = 'got ' || v_attempts; END IF;",
        f" IF p_timeout IS NOT NULL AND NOT (p_timeout > 0 AND p_timeout <= {delay_max}) THEN",
        f"  RAISE EXCEPTION '{r['timeout']}' USING ERRCODE = '22023', DETAIL = 'got ' || p_timeout; END IF;",
    )


def _sql_enqueue(d: Dialect) -> list[str | Step]:
    """Enqueue from SQL (part 5): ``<prefix>enqueue(name, args, ...)``, a function any client or
    trigger calls (docs/wire-format.md; the parameters and their checks: :mod:`errands.core.wire`).

    It does what the Python enqueue does for a plain job, and for a unique key what its default rule
    does (``Steps.insert_unique``): under the key's row lock, a holder that waits or runs (or ended
    less than its unique period ago) is returned and nothing is stored; a key whose job is gone is
    taken over; two callers racing for a new key meet on the key table's primary key and the loser
    removes its row.  It notifies the channel workers LISTEN on (``<prefix>jobs``, the queue as
    payload), delivered when the caller's transaction commits.  ``SET search_path FROM CURRENT``: it
    finds errands' tables in the schema it was created in, whatever the caller's search_path.
    ``CREATE OR REPLACE``: a later version may change the body in place."""
    name = d.prefix + wire.ENTRY_POINT
    insert = ("INSERT INTO {jobs} (queue, name, payload, priority, attempts, max_attempts, timeout, available_at,"
              " created_at, unique_key) VALUES (v_queue, p_name, v_payload, v_priority, 0, v_attempts, p_timeout,"
              " now() + make_interval(secs => v_delay), now(), p_key) RETURNING id INTO v_id;")
    notify = f"PERFORM pg_notify('{d.prefix}jobs', v_queue); RETURN v_id;"
    lines = (
        "#variable_conflict use_column",
        "DECLARE",
        " p_name ALIAS FOR $1; p_args ALIAS FOR $2; p_kwargs ALIAS FOR $3; p_key ALIAS FOR $7;"
        " p_timeout ALIAS FOR $9;",
        f" v_queue text := COALESCE($4, '{wire.DEFAULT_QUEUE}'); v_priority bigint := COALESCE($5, 0);",
        " v_delay double precision := COALESCE($6, 0);",
        f" v_attempts bigint := COALESCE($8, {wire.DEFAULT_MAX_ATTEMPTS});",
        " v_payload text; v_id bigint; v_holder bigint; v_held boolean; v_rows integer;",
        "BEGIN",
        *_enqueue_checks(name),
        " v_payload := jsonb_build_object('args', p_args, 'kwargs', p_kwargs)::text;",
        " IF p_key IS NULL THEN",
        "  " + insert,
        "  " + notify,
        " END IF;",
        " FOR attempt IN 1..10 LOOP  -- as Steps.insert_unique",
        "  SELECT job_id, COALESCE(expires_at > now(), false) INTO v_holder, v_held",
        "   FROM {unique_keys} WHERE name = p_key FOR UPDATE;",
        "  IF FOUND THEN",
        "   IF v_held OR EXISTS (SELECT 1 FROM {jobs} WHERE id = v_holder) THEN RETURN v_holder; END IF;",
        "   " + insert,
        "   UPDATE {unique_keys} SET job_id = v_id, period = NULL, expires_at = NULL WHERE name = p_key;",
        "   " + notify,
        "  END IF;",
        "  " + insert,
        "  INSERT INTO {unique_keys} (name, job_id, period) VALUES (p_key, v_id, NULL) ON CONFLICT DO NOTHING;",
        "  GET DIAGNOSTICS v_rows = ROW_COUNT;",
        "  IF v_rows = 1 THEN " + notify + " END IF;",
        "  DELETE FROM {jobs} WHERE id = v_id;  -- another caller took the key meanwhile",
        " END LOOP;",
        " RAISE EXCEPTION USING ERRCODE = '40001',",
        "  MESSAGE = 'unique key ' || quote_literal(p_key) || ' kept changing hands; try again';",
        "END",
    )
    head = (f"CREATE OR REPLACE FUNCTION {name}(name text, args jsonb DEFAULT '[]', kwargs jsonb DEFAULT '{{}}',"
            " queue text DEFAULT NULL, priority bigint DEFAULT NULL, delay double precision DEFAULT NULL,"
            " unique_key text DEFAULT NULL, max_attempts bigint DEFAULT NULL, timeout double precision DEFAULT NULL)"
            " RETURNS bigint LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $errands$")
    body = "\n".join(lines)
    for table in ("jobs", "unique_keys"):
        body = body.replace("{" + table + "}", d.tables[table])
    return [f"{head}\n{body}\n$errands$",
            f"COMMENT ON FUNCTION {name} IS 'errands: enqueue a job from SQL, wire format version {wire.WIRE_VERSION}'"]


# Issue 29, what a job costs the database: version 12 is made of one section per part, each owned by
# that part (sections are kept apart so the parts' changes never touch each other's lines).


def _version_12(d: Dialect) -> list[str | Step]:
    return [*_room_for_the_lease_update(d)]


def _room_for_the_lease_update(d: Dialect) -> list[str | Step]:
    """Three fifths of each page of the jobs table left free at insert (``fillfactor = 40``), so that the
    claim's UPDATE writes each row's new version on the row's own page.  A claim updates every row of
    a page in one transaction, so a page needs room for a second version of each of its rows.  On
    the same page PostgreSQL logs only the bytes of the row that changed, and it need not lock the
    old version in a WAL record of its own while it looks for another page: the drain's WAL went from
    537 to 397 bytes a job (docs/performance.md, "Pushing WAL down, one change at a time").  The
    UPDATE is still not HOT (the claim and lease indexes name the columns it changes), so its index
    entries stay.  The price: a waiting backlog takes two and a half times the pages.  40 and not
    50: a claimed row is some 45 bytes longer than the waiting one (the worker id, two timestamps),
    and at 50 a quarter of the new versions of the bench's rows found no room.

    A storage parameter, no rewrite, a brief ``SHARE UPDATE EXCLUSIVE`` lock on a populated table;
    rows already stored keep their pages as they are, and each page follows the setting from the
    next insert into it once its rows are gone (a queue table turns over with its backlog)."""
    return [d.q("ALTER TABLE {jobs} SET (fillfactor = 40)")]


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
