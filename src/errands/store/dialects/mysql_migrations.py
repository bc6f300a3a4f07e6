"""MySQL's and MariaDB's schema, version by version: the statements ``errands migrate`` runs under
``GET_LOCK``.

MySQL commits each DDL statement on its own, so a version is not one transaction: a migration
interrupted half-way is run again, and every statement must be harmless the second time
(``CREATE TABLE IF NOT EXISTS``, or a :class:`~errands.store.dialects.base.Step` guarded by a look
at information_schema).

Versions are listed in order at the bottom (:data:`MIGRATIONS`); the dialect's schema version is
the last of them.  A change to the schema is a new version appended here and, with the same
number, in ``sqlite_migrations`` and ``postgres_migrations``; a version that has shipped is never
edited, because a database that recorded it never runs it again.
"""

from __future__ import annotations

from ...core import wire
from .base import Dialect, SchemaVersion, Step, in_version_order

TABLE = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
"""Ends every CREATE TABLE: InnoDB, utf8mb4, and its binary collation (text compares byte for byte)."""


def _version_1(d: Dialect) -> list[str | Step]:
    return [d.q(s) for s in (
        "CREATE TABLE IF NOT EXISTS {jobs} ("
        " id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
        " queue VARCHAR(60) NOT NULL, name VARCHAR(255) NOT NULL, payload MEDIUMTEXT NOT NULL,"
        " priority INT NOT NULL DEFAULT 0, attempts INT NOT NULL DEFAULT 0,"
        " max_attempts INT NOT NULL, timeout DOUBLE NULL,"
        " available_at DATETIME(6) NOT NULL, created_at DATETIME(6) NOT NULL,"
        " reserved_by VARCHAR(120) NULL, reserved_at DATETIME(6) NULL, reserved_until DATETIME(6) NULL,"
        " last_error TEXT NULL,"
        # Matches the claim's WHERE (queue, reserved_by IS NULL) and ORDER BY (priority DESC, id).
        " KEY {jobs}_claim (queue, reserved_by, priority DESC, id),"
        " KEY {jobs}_lease (reserved_until))" + TABLE,
        "CREATE TABLE IF NOT EXISTS {failed} ("
        " id BIGINT NOT NULL PRIMARY KEY, queue VARCHAR(60) NOT NULL, name VARCHAR(255) NOT NULL,"
        " payload MEDIUMTEXT NOT NULL, priority INT NOT NULL, attempts INT NOT NULL, max_attempts INT NOT NULL,"
        " timeout DOUBLE NULL, created_at DATETIME(6) NOT NULL, failed_at DATETIME(6) NOT NULL,"
        " error_type VARCHAR(255) NOT NULL, error_message TEXT NOT NULL,"
        " KEY {failed}_queue (queue, failed_at))" + TABLE,
        "CREATE TABLE IF NOT EXISTS {workers} ("
        " id VARCHAR(120) NOT NULL PRIMARY KEY, hostname VARCHAR(255) NOT NULL, pid INT NOT NULL,"
        " queues TEXT NOT NULL, concurrency INT NOT NULL, started_at DATETIME(6) NOT NULL,"
        " heartbeat_at DATETIME(6) NOT NULL, jobs_done BIGINT NOT NULL DEFAULT 0)" + TABLE,
    )]


def _version_2(d: Dialect) -> list[str | Step]:
    """MySQL commits each DDL statement on its own, so a step that ran before a crash must be
    skippable: every ALTER is guarded by a look at information_schema (MySQL 8 has no
    ``ADD COLUMN IF NOT EXISTS``)."""

    def index(tbl: str, name: str, spec: str) -> Step:
        return Step(d.q(f"ALTER TABLE {{{tbl}}} ADD {spec}"),
                    "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                    f"AND TABLE_NAME = '{d.q('{' + tbl + '}')}' AND INDEX_NAME = '{d.q(name)}'")

    jobs_claim_has_blocked = ("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = "
                              f"DATABASE() AND TABLE_NAME = '{d.t_jobs}' AND INDEX_NAME = "
                              f"'{d.t_jobs}_claim' AND COLUMN_NAME = 'blocked_by'")
    return [
        *(d.added_column("jobs", c) for c in (
            "unique_key VARCHAR(255) NULL", "blocked_by BIGINT NULL", "batch_id BIGINT NULL",
            "concurrency_key VARCHAR(255) NULL", "flags INT NOT NULL DEFAULT 0",
            "cancel_requested_at DATETIME(6) NULL", "admitted_at DATETIME(6) NULL", "progress DOUBLE NULL",
            "progress_message VARCHAR(255) NULL")),
        *(d.added_column("failed", c) for c in (
            "unique_key VARCHAR(255) NULL", "batch_id BIGINT NULL", "concurrency_key VARCHAR(255) NULL",
            "flags INT NOT NULL DEFAULT 0")),
        # No partial indexes: blocked jobs are kept out of the claim's range by an equality
        # on blocked_by IS NULL, ahead of the ORDER BY columns.
        Step(d.q("ALTER TABLE {jobs} DROP KEY {jobs}_claim, ADD KEY {jobs}_claim "
                 "(queue, reserved_by, blocked_by, priority DESC, id)"), jobs_claim_has_blocked),
        # Side tables instead of indexes on the jobs table: InnoDB would keep an entry for every
        # NULL, and a plain job's insert and delete would pay for four more indexes.
        index("failed", "{failed}_failed_at", "KEY {failed}_failed_at (failed_at)"),
        *(d.q(s) for s in (
            "CREATE TABLE IF NOT EXISTS {results} (id BIGINT NOT NULL PRIMARY KEY, queue VARCHAR(60) NOT NULL,"
            " name VARCHAR(255) NOT NULL, state VARCHAR(20) NOT NULL, result MEDIUMTEXT NULL, message TEXT NULL,"
            " attempts INT NOT NULL, batch_id BIGINT NULL, finished_at DATETIME(6) NOT NULL,"
            " expires_at DATETIME(6) NOT NULL, KEY {results}_expiry (expires_at),"
            " KEY {results}_batch (batch_id))" + TABLE,
            "CREATE TABLE IF NOT EXISTS {batches} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
            " kind VARCHAR(10) NOT NULL, total INT NOT NULL, done INT NOT NULL DEFAULT 0,"
            " failed INT NOT NULL DEFAULT 0, on_complete MEDIUMTEXT NULL, on_failure MEDIUMTEXT NULL,"
            " created_at DATETIME(6) NOT NULL, completed_at DATETIME(6) NULL,"
            " failure_fired_at DATETIME(6) NULL)" + TABLE,
            "CREATE TABLE IF NOT EXISTS {locks} (name VARCHAR(255) NOT NULL PRIMARY KEY)" + TABLE,
            "CREATE TABLE IF NOT EXISTS {unique_keys} (name VARCHAR(255) NOT NULL PRIMARY KEY,"
            " job_id BIGINT NOT NULL)" + TABLE,
            "CREATE TABLE IF NOT EXISTS {dependencies} (parent_id BIGINT NOT NULL, child_id BIGINT NOT NULL,"
            " PRIMARY KEY (parent_id, child_id))" + TABLE,
            "CREATE TABLE IF NOT EXISTS {group_runs} (job_id BIGINT NOT NULL PRIMARY KEY,"
            " name VARCHAR(255) NOT NULL, KEY {group_runs}_name (name))" + TABLE,
            "CREATE TABLE IF NOT EXISTS {rate_starts} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
            " name VARCHAR(255) NOT NULL, started_at DATETIME(6) NOT NULL,"
            " KEY {rate_starts}_window (name, started_at))" + TABLE,
            "CREATE TABLE IF NOT EXISTS {periodic} (name VARCHAR(255) NOT NULL PRIMARY KEY,"
            " last_slot DATETIME(6) NULL, updated_at DATETIME(6) NOT NULL)" + TABLE,
            "CREATE TABLE IF NOT EXISTS {queues} (name VARCHAR(60) NOT NULL PRIMARY KEY,"
            " paused INT NOT NULL DEFAULT 0, changed_at DATETIME(6) NOT NULL)" + TABLE,
        )),
    ]


def _version_3(d: Dialect) -> list[str | Step]:
    return [d.q(s) for s in (
        "CREATE TABLE IF NOT EXISTS {users} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
        " username VARCHAR(100) NOT NULL, password_hash VARCHAR(255) NOT NULL, role VARCHAR(20) NOT NULL,"
        " disabled INT NOT NULL DEFAULT 0, theme VARCHAR(10) NOT NULL DEFAULT 'auto',"
        " created_at DATETIME(6) NOT NULL, last_login_at DATETIME(6) NULL, UNIQUE KEY {users}_name (username))"
        + TABLE,
        "CREATE TABLE IF NOT EXISTS {sessions} (token_hash VARCHAR(64) NOT NULL PRIMARY KEY,"
        " user_id BIGINT NOT NULL, csrf VARCHAR(64) NOT NULL, created_at DATETIME(6) NOT NULL,"
        " expires_at DATETIME(6) NOT NULL,"
        " KEY {sessions}_user (user_id))" + TABLE,
        "CREATE TABLE IF NOT EXISTS {remember} (selector VARCHAR(32) NOT NULL PRIMARY KEY,"
        " validator_hash VARCHAR(64) NOT NULL, user_id BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL)" + TABLE,
        "CREATE TABLE IF NOT EXISTS {login_attempts} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
        " username VARCHAR(100) NOT NULL, ip VARCHAR(64) NOT NULL, at DATETIME(6) NOT NULL, ok INT NOT NULL,"
        " KEY {login_attempts}_user (username, at), KEY {login_attempts}_ip (ip, at))" + TABLE,
        "CREATE TABLE IF NOT EXISTS {audit} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
        " at DATETIME(6) NOT NULL, actor VARCHAR(100) NOT NULL, action VARCHAR(50) NOT NULL,"
        " target VARCHAR(255) NOT NULL,"
        " detail TEXT NULL)" + TABLE,
        "CREATE TABLE IF NOT EXISTS {stats} (minute DATETIME(6) NOT NULL, queue VARCHAR(60) NOT NULL,"
        " succeeded BIGINT NOT NULL, failed BIGINT NOT NULL, PRIMARY KEY (minute, queue))" + TABLE,
    )]


def _version_4(d: Dialect) -> list[str | Step]:
    """Issue 14: labels, rate-limit costs, unique periods, the error history.  Nullable columns
    and a new side table; each ALTER guarded (MySQL's DDL commits on its own)."""
    return [
        d.added_column("jobs", "label VARCHAR(255) NULL"), d.added_column("jobs", "cost INT NULL"),
        d.added_column("failed", "label VARCHAR(255) NULL"), d.added_column("failed", "cost INT NULL"),
        d.added_column("results", "label VARCHAR(255) NULL"),
        d.added_column("unique_keys", "period DOUBLE NULL"),
        d.added_column("unique_keys", "expires_at DATETIME(6) NULL"),
        d.added_column("rate_starts", "units INT NULL"),
        # One row per failed attempt, keyed by job id: a plain successful job writes none.
        d.q("CREATE TABLE IF NOT EXISTS {job_errors} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
            " job_id BIGINT NOT NULL, attempt INT NOT NULL, failed_at DATETIME(6) NOT NULL,"
            " error_type VARCHAR(255) NOT NULL, error_message TEXT NOT NULL, traceback MEDIUMTEXT NULL,"
            " KEY {job_errors}_job (job_id, id))" + TABLE),
    ]


def _version_5(d: Dialect) -> list[str | Step]:
    """Workflows: a job may wait for several others (``blocked_by`` now counts them; each old
    row waited for one), and a workflow's steps keep their graph and result inputs.  Each
    ALTER is guarded (MySQL commits DDL on its own); the UPDATE may run twice harmlessly."""
    return [
        d.q("UPDATE {jobs} SET blocked_by = 1 WHERE blocked_by IS NOT NULL"),
        *(d.added_column("batches", c) for c in ("name VARCHAR(255) NULL", "policy VARCHAR(10) NULL",
                                                 "result_ttl DOUBLE NULL")),
        d.q("CREATE TABLE IF NOT EXISTS {steps} (job_id BIGINT NOT NULL PRIMARY KEY, batch_id BIGINT NOT NULL,"
            " position INT NOT NULL, label VARCHAR(255) NOT NULL, parents MEDIUMTEXT NOT NULL,"
            " inputs MEDIUMTEXT NULL, KEY {steps}_batch (batch_id, position))" + TABLE),
    ]


def _version_6(d: Dialect) -> list[str | Step]:
    # How often the job snoozed (raise Snooze): capped by its max_snoozes; never read by a claim.
    # MariaDB 10.3+ and MySQL 8 add a column with a constant default in place (no table copy).
    return [d.added_column("jobs", "snoozes INT NOT NULL DEFAULT 0")]


def _version_7(d: Dialect) -> list[str | Step]:
    # Each worker's own lease and heartbeat interval: liveness is judged by them (NULL: a worker
    # of an errands that did not record them, judged by the reader's lease as before).
    return [d.added_column("workers", "lease DOUBLE NULL"),
            d.added_column("workers", "heartbeat_every DOUBLE NULL")]


def _version_8(d: Dialect) -> list[str | Step]:
    # Limits per queue that operators set from the dashboard; workers read them every few seconds.
    return [d.q("CREATE TABLE IF NOT EXISTS {queue_limits} (name VARCHAR(60) NOT NULL PRIMARY KEY,"
                " concurrency INT NULL, rate_count INT NULL, rate_period DOUBLE NULL,"
                " changed_at DATETIME(6) NOT NULL)" + TABLE)]


def _version_9(d: Dialect) -> list[str | Step]:
    """The alerts table (whether each alert threshold is crossed, changed by conditional UPDATEs: one
    deliverer), and the due time at the end of the claim index.  With it, the index alone tells a
    waiting job ready from delayed: the overview's per-queue sample, the counts of ready and delayed
    jobs and the claim's own filter no longer fetch each row by primary key (a random read each: six
    samples of 5,001 took 1.4 s with the jobs table bigger than the buffer pool).  The claim's order
    (priority, id) is unchanged; InnoDB rebuilds the index in place (its default for a secondary
    index), writes go on."""
    has_due = ("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
               f"AND TABLE_NAME = '{d.t_jobs}' AND INDEX_NAME = '{d.t_jobs}_claim' "
               "AND COLUMN_NAME = 'available_at'")
    return [
        d.q("CREATE TABLE IF NOT EXISTS {alerts} (kind VARCHAR(20) NOT NULL, subject VARCHAR(60) NOT NULL,"
            " crossed INT NOT NULL DEFAULT 0, value DOUBLE NULL, threshold DOUBLE NULL,"
            " changed_at DATETIME(6) NULL, checked_at DATETIME(6) NULL, PRIMARY KEY (kind, subject))" + TABLE),
        Step(d.q("ALTER TABLE {jobs} DROP KEY {jobs}_claim, ADD KEY {jobs}_claim "
                 "(queue, reserved_by, blocked_by, priority DESC, id, available_at)"), has_due),
    ]


def _version_10(d: Dialect) -> list[str | Step]:
    # Issue 25: when a job expires unstarted, its deadline across retries, its rate-limit key, aging.
    # Nullable columns that a plain job leaves NULL (no table rewrite).
    has_aging = ("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                 f"AND TABLE_NAME = '{d.t_jobs}' AND INDEX_NAME = '{d.t_jobs}_aging'")
    steps: list[str | Step] = [*d.add_job_column("expires_at"), *d.add_job_column("deadline_at"),
                               *d.add_job_column("rate_key"), *d.add_job_column("age_after"),
                               *d.add_job_column("age_base"), *d.add_job_column("age_cap")]
    # Per-key rate limits: when each start leaves its window, so the prune deletes passed windows
    # (the keys that fell idle) a bounded number at a time, through this index.
    has_expiry = ("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                  f"AND TABLE_NAME = '{d.q('{rate_starts}')}' AND INDEX_NAME = '{d.q('{rate_starts}')}_expiry'")
    steps += [d.added_column("rate_starts", "expires_at DATETIME(6) NULL"),
              Step(d.q("ALTER TABLE {rate_starts} ADD KEY {rate_starts}_expiry (expires_at)"), has_expiry)]
    # Aging: the jobs that still age (no partial index here: age_cap is NULL for every other
    # job, and the pass reads the non-NULL range only).
    steps.append(Step(d.q("ALTER TABLE {jobs} ADD INDEX {jobs}_aging (age_cap)"), has_aging))
    steps += _fairness(d)
    return steps


def _fairness(d: Dialect) -> list[str | Step]:
    """Fairness between keys (issue 25): each job's key and turn (0 for a job without a key: a constant
    default, added in place), the claim index with the turn after priority (the claim's order is
    priority, turn, id; InnoDB rebuilds the index in place, writes go on), and each key's counter of
    turns handed out per queue.  Each ALTER guarded (MySQL's DDL commits on its own)."""
    has_turn = ("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                f"AND TABLE_NAME = '{d.t_jobs}' AND INDEX_NAME = '{d.t_jobs}_claim' "
                "AND COLUMN_NAME = 'fair_turn'")
    return [
        *d.add_job_column("fairness_key"), *d.add_job_column("fair_turn"),
        Step(d.q("ALTER TABLE {jobs} DROP KEY {jobs}_claim, ADD KEY {jobs}_claim "
                 "(queue, reserved_by, blocked_by, priority DESC, fair_turn, id, available_at)"), has_turn),
        # The (queue, turn) key: the highest turn of a queue (where a key starts when no keyed job
        # waits) is one index probe.
        d.q("CREATE TABLE IF NOT EXISTS {fair_keys} (queue VARCHAR(60) NOT NULL, name VARCHAR(255) NOT NULL,"
            " turn BIGINT NOT NULL DEFAULT 0, used_at DATETIME(6) NOT NULL, PRIMARY KEY (queue, name),"
            " KEY {fair_keys}_turn (queue, turn))" + TABLE),
    ]


# Issue 27, operating a running fleet: version 11 is made of one section per part, each owned by
# that part (sections are kept apart so the parts' changes never touch each other's lines).


def _version_11(d: Dialect) -> list[str | Step]:
    return [*_dynamic_schedules(d), *_worker_commands(d), *_checkpoints(d), *_run_logs(d), *_sql_enqueue(d)]


def _dynamic_schedules(d: Dialect) -> list[str | Step]:
    """Schedules stored in the database beside the code's (part 1): one row per schedule, its
    ``version`` bumped by every change; ``{periodic}.version`` repeats it, so that a scheduler's claim of
    a slot (a conditional UPDATE of that row) succeeds only under the definition it read."""
    return [
        d.q("CREATE TABLE IF NOT EXISTS {schedules} (name VARCHAR(255) NOT NULL PRIMARY KEY,"
            " job VARCHAR(255) NOT NULL, cron VARCHAR(255) NOT NULL, timezone VARCHAR(64) NULL,"
            " payload MEDIUMTEXT NOT NULL, queue VARCHAR(60) NULL, priority INT NULL,"
            " catch_up VARCHAR(10) NOT NULL DEFAULT 'latest', catch_up_limit INT NULL, paused INT NOT NULL DEFAULT 0,"
            " version BIGINT NOT NULL DEFAULT 1, created_at DATETIME(6) NOT NULL, updated_at DATETIME(6) NOT NULL)"
            + TABLE),
        d.added_column("periodic", "version BIGINT NULL"),
    ]


def _worker_commands(d: Dialect) -> list[str | Step]:
    """A worker process quieted or stopped from outside, read with its heartbeat (part 2): ``command``
    is what an operator asked of it ('quiet', 'stop'; NULL: run), ``status`` what it reports doing
    ('quiet', 'stopping'; NULL: running).  Both nullable: no table rewrite."""
    return [d.added_column("workers", "command VARCHAR(16) NULL"),
            d.added_column("workers", "status VARCHAR(16) NULL")]


def _checkpoints(d: Dialect) -> list[str | Step]:
    """A long job's checkpoint and its resumptions (part 3): the JSON a handler stored with
    ``current_job().checkpoint(value)``, kept by the dead letter (a retry from there resumes from it),
    and how often a stopping worker gave the job back from it (against ``max_resumptions``)."""
    return [*d.add_job_column("checkpoint"), *d.add_job_column("resumptions")]


def _run_logs(d: Dialect) -> list[str | Step]:
    """The log records each attempt emitted (part 4): one row per attempt that logged and whose job
    keeps a record (waiting, dead, or with a kept result), its records as one JSON array (MEDIUMTEXT:
    a 64 KB bound of messages is more than TEXT holds once encoded)."""
    return [
        d.q("CREATE TABLE IF NOT EXISTS {run_logs} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
            " job_id BIGINT NOT NULL, attempt INT NOT NULL, worker VARCHAR(255) NULL,"
            " logged_at DATETIME(6) NOT NULL, dropped INT NOT NULL, records MEDIUMTEXT NOT NULL,"
            " KEY {run_logs}_job (job_id, id))" + TABLE),
    ]


def _enqueue_checks(name: str) -> tuple[str, ...]:
    """The procedure's checks of its input: SIGNAL SQLSTATE 22023 with :data:`wire.REFUSALS`' words."""
    r = {k: f"{name}: {v}".replace("'", "''") for k, v in wire.REFUSALS.items()}
    delay_max = f"{wire.DELAY_MAX:.0f}"

    def refuse(what: str) -> str:
        return f"SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = '{r[what]}'"

    return (
        f" IF p_name IS NULL OR CHAR_LENGTH(p_name) NOT BETWEEN 1 AND {wire.NAME_MAX} THEN {refuse('name')}; END IF;",
        f" IF NOT JSON_VALID(v_args) THEN {refuse('args')}; END IF;",
        f" IF JSON_TYPE(v_args) <> 'ARRAY' THEN {refuse('args')}; END IF;",
        f" IF NOT JSON_VALID(v_kwargs) THEN {refuse('kwargs')}; END IF;",
        f" IF JSON_TYPE(v_kwargs) <> 'OBJECT' THEN {refuse('kwargs')}; END IF;",
        f" IF NOT v_queue REGEXP '^[A-Za-z0-9._-]{{1,{wire.QUEUE_MAX}}}$' OR v_queue IN ('.', '..') THEN"
        f" {refuse('queue')}; END IF;",
        f" IF v_priority NOT BETWEEN {wire.MIN_PRIORITY} AND {wire.MAX_PRIORITY} THEN {refuse('priority')}; END IF;",
        f" IF NOT (v_delay >= 0 AND v_delay <= {delay_max}) THEN {refuse('delay')}; END IF;",
        f" IF p_unique_key IS NOT NULL AND CHAR_LENGTH(p_unique_key) NOT BETWEEN 1 AND {wire.KEY_MAX} THEN"
        f" {refuse('unique_key')}; END IF;",
        f" IF v_attempts NOT BETWEEN 1 AND {wire.ATTEMPTS_MAX} THEN {refuse('max_attempts')}; END IF;",
        f" IF p_timeout IS NOT NULL AND NOT (p_timeout > 0 AND p_timeout <= {delay_max}) THEN"
        f" {refuse('timeout')}; END IF;",
    )


def _sql_enqueue(d: Dialect) -> list[str | Step]:
    """Enqueue from SQL (part 5): the stored procedure ``<prefix>enqueue(name, args, kwargs, queue,
    priority, delay, unique_key, max_attempts, timeout, OUT id)``, every parameter positional and
    NULL for its default (docs/wire-format.md; :mod:`errands.core.wire`).  It returns no result set
    (the id comes back in the OUT parameter), so a trigger on the user's own tables may CALL it.

    It does what the Python enqueue does for a plain job, and for a unique key what its default rule
    does (``Steps.insert_unique``): under the key's row lock a holder that waits or runs (or ended
    less than its unique period ago) is returned and nothing is stored; a key whose job is gone is
    taken over; the loser of a race for a new key removes its row.  It runs in the caller's
    transaction (a procedure a trigger calls may not commit): under autocommit each of its statements
    commits on its own, so two callers racing for one new key are exact only inside a transaction
    (docs/wire-format.md).  MySQL has no LISTEN: workers notice the new id by polling, as always.
    Dropped and created again (MySQL has no CREATE OR REPLACE PROCEDURE): harmless when run twice."""
    name = d.prefix + wire.ENTRY_POINT
    text = "LONGTEXT CHARACTER SET utf8mb4"

    insert = ("INSERT INTO {jobs} (queue, name, payload, priority, attempts, max_attempts, timeout, available_at,"
              " created_at, unique_key) VALUES (v_queue, p_name, v_payload, v_priority, 0, v_attempts, p_timeout,"
              " UTC_TIMESTAMP(6) + INTERVAL ROUND(v_delay * 1000000) MICROSECOND, UTC_TIMESTAMP(6), p_unique_key);"
              " SET p_id = LAST_INSERT_ID();")
    lines = (
        "proc: BEGIN",
        f" DECLARE v_args {text} DEFAULT COALESCE(p_args, '[]');",
        f" DECLARE v_kwargs {text} DEFAULT COALESCE(p_kwargs, '{{}}');",
        f" DECLARE v_queue {text} DEFAULT COALESCE(p_queue, '{wire.DEFAULT_QUEUE}');",
        " DECLARE v_priority BIGINT DEFAULT COALESCE(p_priority, 0);",
        " DECLARE v_delay DOUBLE DEFAULT COALESCE(p_delay, 0);",
        f" DECLARE v_attempts BIGINT DEFAULT COALESCE(p_max_attempts, {wire.DEFAULT_MAX_ATTEMPTS});",
        f" DECLARE v_payload {text};",
        " DECLARE v_holder BIGINT; DECLARE v_held INT; DECLARE v_found INT; DECLARE v_try INT DEFAULT 0;",
        " DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;",
        *_enqueue_checks(name),
        " SET v_payload = CONCAT('{\"args\":', v_args, ',\"kwargs\":', v_kwargs, '}');",
        " IF p_unique_key IS NULL THEN",
        "  " + insert,
        "  LEAVE proc;",
        " END IF;",
        " retry: LOOP  -- as Steps.insert_unique",
        "  SET v_try = v_try + 1, v_found = 1, v_holder = NULL, v_held = 0;",
        "  IF v_try > 10 THEN SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'unique key kept changing hands; try again';"
        " END IF;",
        "  SELECT job_id, COALESCE(expires_at > UTC_TIMESTAMP(6), 0) INTO v_holder, v_held FROM {unique_keys}",
        "   WHERE name = p_unique_key COLLATE utf8mb4_bin FOR UPDATE;",
        "  IF v_found = 1 THEN",
        "   IF v_held = 1 OR EXISTS (SELECT 1 FROM {jobs} WHERE id = v_holder) THEN SET p_id = v_holder; LEAVE proc;",
        "   END IF;",
        "   " + insert,
        "   UPDATE {unique_keys} SET job_id = p_id, period = NULL, expires_at = NULL",
        "    WHERE name = p_unique_key COLLATE utf8mb4_bin;",
        "   LEAVE proc;",
        "  END IF;",
        "  " + insert,
        "  INSERT IGNORE INTO {unique_keys} (name, job_id, period) VALUES (p_unique_key, p_id, NULL);",
        "  IF ROW_COUNT() = 1 THEN LEAVE proc; END IF;",
        "  DELETE FROM {jobs} WHERE id = p_id;  -- another caller took the key meanwhile",
        " END LOOP;",
        "END",
    )
    body = "\n".join(lines)
    for table in ("jobs", "unique_keys"):
        body = body.replace("{" + table + "}", d.tables[table])
    head = (f"CREATE PROCEDURE {name}(IN p_name {text}, IN p_args {text}, IN p_kwargs {text}, IN p_queue {text},"
            f" IN p_priority BIGINT, IN p_delay DOUBLE, IN p_unique_key {text}, IN p_max_attempts BIGINT,"
            f" IN p_timeout DOUBLE, OUT p_id BIGINT) MODIFIES SQL DATA"
            f" COMMENT 'errands: enqueue a job from SQL, wire format version {wire.WIRE_VERSION}'")
    # Optional steps: a user without CREATE ROUTINE / ALTER ROUTINE still migrates (with a warning; the
    # doctor says what to grant); the CREATE is passed over where a DROP that was refused left one.
    exists = ("SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() "
              f"AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME = '{name}'")
    return [Step(f"DROP PROCEDURE IF EXISTS {name}", "SELECT 0", optional=True),
            Step(f"{head}\n{body}", exists, optional=True)]


# Issue 29, what a job costs the database: version 12 is made of one section per part, each owned by
# that part (sections are kept apart so the parts' changes never touch each other's lines).


def _version_12(d: Dialect) -> list[str | Step]:
    return [*_room_for_the_lease_update(d)]


def _room_for_the_lease_update(d: Dialect) -> list[str | Step]:
    # PostgreSQL leaves half of each jobs page free for the claim's new row versions (fillfactor).
    # InnoDB updates the row in place in its clustered index (undo log aside) and has no fillfactor to set
    # per table: nothing to do.
    return []


MIGRATIONS = in_version_order(
    SchemaVersion(1, "the jobs table with its claim and lease indexes, the dead letter, the workers registry",
                  _version_1),
    SchemaVersion(2, "features: unique keys, dependencies, batches, limits, results, schedules, paused queues",
                  _version_2),
    SchemaVersion(3, "the dashboard's tables (users, sessions, remember-me tokens, login attempts, audit, "
                  "stats)", _version_3),
    SchemaVersion(4, "labels, rate-limit costs, unique periods, the error history (issue 14)", _version_4),
    SchemaVersion(5, "workflows: dependency counts, batch names and policies, the steps table", _version_5),
    SchemaVersion(6, "how often each job snoozed", _version_6),
    SchemaVersion(7, "each worker's own lease and heartbeat interval", _version_7),
    SchemaVersion(8, "limits per queue, set from the dashboard", _version_8),
    SchemaVersion(9, "the alerts table, and the due time at the end of the claim index", _version_9),
    SchemaVersion(10, "expiry, deadlines across retries, per-key rate limits, priority aging, fairness between keys "
                      "(issue 25)", _version_10),
    SchemaVersion(11, "operating a running fleet: dynamic schedules, worker commands, checkpoints, per-run logs, "
                      "enqueue from SQL (issue 27)", _version_11),
    SchemaVersion(12, "what a job costs the database (issue 29): room on each page of the jobs table for the "
                      "lease UPDATE", _version_12),
)
