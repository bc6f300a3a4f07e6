"""How fast the dashboard answers with a big, realistic database (issue: the dashboard stays
responsive with 1,000,000 jobs and 100,000 dead ones).

    .venv/bin/python bench/dashboard_pages.py                       # PostgreSQL, 1,000,000 / 100,000
    .venv/bin/python bench/dashboard_pages.py --backend mariadb --jobs 100000 --dead 10000
    make bench-dashboard [BACKEND=postgres|mariadb|sqlite] [JOBS=1000000] [DEAD=100000]

What it does, in order:

1. creates a scratch database (``errands_bench_dash_*`` on PostgreSQL or MariaDB, a temporary
   SQLite file), and drops it at the end (``--keep`` keeps it and prints its URL; ``--reuse URL``
   times an already filled one, which is how a fix is checked without filling again);
2. fills it the way a busy installation looks: jobs over six queues and eleven job names with
   realistic JSON arguments, ready ones due over the last two days, delayed ones up to three days
   ahead, some waiting for a retry with their last error, some blocked by a dependency, running
   jobs leased by live workers and stale ones left by two dead workers; dead-letter entries
   interleaved with the jobs (same id sequence) with a few dozen distinct errors over seven days;
   per-minute throughput rows for seven days, an audit log, two periodic schedules, a paused
   queue.  Jobs go in through ``app.enqueue_many`` (PostgreSQL: binary COPY); what the public API
   cannot create (running, stale, dead, history) is written with plain SQL of the store's own
   templates.  Then the statistics a real server would have: VACUUM ANALYZE on PostgreSQL,
   ANALYZE TABLE on MariaDB (InnoDB recomputes them itself after 10 % of a table changes), and
   nothing on SQLite (errands never runs ANALYZE there, so neither does a real installation);
3. serves the real dashboard (``create_dashboard`` with its own logins) with uvicorn in a
   subprocess, logs in over HTTP, and times every page and API endpoint (warm-up, then
   ``--reps`` requests each: median, p95, max), while a thread plays the live workers
   (heartbeats, lease extensions, this minute's throughput) as a real installation has them;
4. prints a table with each median's ratio to two peers measured in the same run, ``/healthz``
   (HTTP plus one query) and a bare ``SELECT 1`` round trip, because this machine is shared and
   noisy; marks every page whose median is over the budget (300 ms); writes
   ``bench/results/dashboard-<UTC timestamp>.json`` and ``.md``.

Nothing asserts a timing.  docs/performance.md ("Dashboard with 1,000,000 jobs") has the method
and the figures.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

import common  # noqa: E402

from errands import Errands  # noqa: E402
from errands.core.rows import NewJob  # noqa: E402

BUDGET_MS = 300.0
USER, PASSWORD = "bench-admin", "dashboard bench password"
BACKENDS = {"postgres": "pg", "mariadb": "mysql", "sqlite": "sqlite"}
LEASE = 30.0

# ---------------------------------------------------------------------------- the application

QUEUES = ("default", "mails", "webhooks", "images", "reports", "billing")
PAUSED_QUEUE = "images"
FIRST = ("ada", "grace", "alan", "edsger", "barbara", "donald", "margaret", "ken", "dennis", "frances",
         "john", "radia", "tim", "shafi", "leslie", "niklaus", "hedy", "katherine", "linus", "guido")
LAST = ("lovelace", "hopper", "turing", "dijkstra", "liskov", "knuth", "hamilton", "thompson", "ritchie",
        "allen", "backus", "perlman", "berners-lee", "goldwasser", "lamport", "wirth", "lamarr", "johnson")
DOMAINS = ("example.com", "example.org", "mail.example.net", "corp.example", "shop.example.co.uk")
TEMPLATES = ("order_shipped", "password_reset", "welcome", "invoice_ready", "weekly_digest", "cart_reminder",
             "account_locked", "subscription_renewed")
EVENTS = ("order.created", "order.paid", "order.refunded", "customer.updated", "invoice.finalized",
          "subscription.cancelled", "shipment.delivered")
CURRENCIES = ("EUR", "USD", "GBP", "CHF", "SEK")
RARE_EMAIL = "grace.hopper-bench-needle@navy.example.mil"
"""Appears in exactly one job's arguments: what a support person searches for."""
ABSENT_TEXT = "no-such-customer@nowhere.example"
"""Appears nowhere: the search that has to look at every candidate row."""
COMMON_TEXT = "order_shipped"
"""In about one job of twenty-five (an email template)."""


def build_app(url: str) -> Errands:
    """The bench's application: eleven jobs over six queues and two periodic schedules.  The
    server subprocess builds the same one, so the dashboard knows the same names."""
    app = Errands(url, lease=LEASE)

    @app.job(name="send_email", queue="mails", max_attempts=5)
    def send_email(to: str, subject: str, template: str, locale: str = "en", context: dict | None = None) -> None:
        """Render a template and hand the message to the mail relay."""

    @app.job(name="send_digest", queue="mails")
    def send_digest(user_id: int, frequency: str) -> None:
        """The daily or weekly digest of one user."""

    @app.job(name="deliver_webhook", queue="webhooks", max_attempts=10, timeout=30)
    def deliver_webhook(endpoint: str, event: str, body: dict) -> None:
        """POST one event to a customer's endpoint (retried with backoff)."""

    @app.job(name="resize_image", queue="images", timeout=120)
    def resize_image(bucket: str, key: str, sizes: list) -> None:
        """Make the renditions of an uploaded image."""

    @app.job(name="generate_thumbnail", queue="images")
    def generate_thumbnail(key: str, width: int, height: int) -> None:
        """One thumbnail."""

    @app.job(name="render_report", queue="reports", timeout=600)
    def render_report(account_id: int, period: str, format: str = "pdf") -> None:
        """A monthly account report."""

    @app.job(name="export_csv", queue="reports", timeout=600)
    def export_csv(account_id: int, table: str, filters: dict) -> None:
        """A CSV export a user asked for."""

    @app.job(name="charge_invoice", queue="billing", max_attempts=4)
    def charge_invoice(invoice_id: str, amount_cents: int, currency: str, customer: dict) -> None:
        """Charge an invoice through the payment provider."""

    @app.job(name="refund_payment", queue="billing", max_attempts=4)
    def refund_payment(payment_id: str, amount_cents: int, reason: str) -> None:
        """Refund (part of) a payment."""

    @app.job(name="sync_crm_contact", queue="default")
    def sync_crm_contact(contact_id: int, fields: dict) -> None:
        """Push a changed contact to the CRM."""

    @app.job(name="cleanup_sessions", queue="default")
    def cleanup_sessions(older_than_days: int) -> None:
        """Forget expired web sessions."""

    @app.periodic("0 3 * * *", name="nightly_rollup", queue="reports")
    def nightly_rollup() -> None:
        """Roll yesterday's numbers up."""

    @app.periodic("*/15 * * * *", name="prune_exports", queue="default")
    def prune_exports() -> None:
        """Delete finished CSV exports older than a week."""

    return app


def _email(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)}.{rng.choice(LAST)}{rng.randrange(10_000)}@{rng.choice(DOMAINS)}"


def _job_args(rng: random.Random, name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments as an application would pass them: keyword-heavy, nested, a few hundred bytes."""
    if name == "send_email":
        template = rng.choice(TEMPLATES)
        return (), {"to": _email(rng), "subject": f"{template.replace('_', ' ').capitalize()} #{rng.randrange(10**6)}",
                    "template": template, "locale": rng.choice(("en", "en", "en", "de", "fr", "sv")),
                    "context": {"order_id": rng.randrange(10**7), "items": rng.randrange(1, 9)}}
    if name == "send_digest":
        return (rng.randrange(10**6), rng.choice(("daily", "weekly"))), {}
    if name == "deliver_webhook":
        return (), {"endpoint": f"https://hooks.{rng.choice(DOMAINS)}/errands/{rng.randrange(10**5)}",
                    "event": rng.choice(EVENTS),
                    "body": {"id": f"evt_{rng.getrandbits(64):016x}", "created": 1_790_000_000 + rng.randrange(10**6),
                             "data": {"object": "order", "id": rng.randrange(10**7), "customer": _email(rng),
                                      "amount": rng.randrange(100, 100_000), "currency": rng.choice(CURRENCIES)}}}
    if name == "resize_image":
        return (), {"bucket": "uploads-prod", "key": f"u/{rng.randrange(10**6)}/{rng.getrandbits(48):012x}.jpg",
                    "sizes": rng.sample([64, 128, 256, 512, 1024, 2048], 3)}
    if name == "generate_thumbnail":
        return (f"u/{rng.randrange(10**6)}/{rng.getrandbits(48):012x}.png", 256, 256), {}
    if name == "render_report":
        return (rng.randrange(10**5), f"2026-{rng.randrange(1, 13):02d}"), {"format": rng.choice(("pdf", "html"))}
    if name == "export_csv":
        return (), {"account_id": rng.randrange(10**5), "table": rng.choice(("orders", "customers", "invoices")),
                    "filters": {"since": f"2026-{rng.randrange(1, 13):02d}-01", "status": rng.choice(("any", "paid"))}}
    if name == "charge_invoice":
        return (), {"invoice_id": f"in_{rng.getrandbits(40):010x}", "amount_cents": rng.randrange(100, 500_000),
                    "currency": rng.choice(CURRENCIES),
                    "customer": {"id": f"cus_{rng.getrandbits(40):010x}", "email": _email(rng)}}
    if name == "refund_payment":
        return (), {"payment_id": f"pi_{rng.getrandbits(40):010x}", "amount_cents": rng.randrange(100, 50_000),
                    "reason": rng.choice(("requested_by_customer", "duplicate", "fraudulent"))}
    if name == "sync_crm_contact":
        return (rng.randrange(10**6),), {"fields": {"email": _email(rng), "plan": rng.choice(("free", "pro", "team"))}}
    return (rng.choice((7, 14, 30)),), {}


JOB_MIX = (("send_email", 30), ("send_digest", 5), ("deliver_webhook", 20), ("resize_image", 10),
           ("generate_thumbnail", 5), ("render_report", 5), ("export_csv", 3), ("charge_invoice", 8),
           ("refund_payment", 2), ("sync_crm_contact", 9), ("cleanup_sessions", 3))

ERRORS = [
    ("requests.exceptions.ConnectionError", "HTTPSConnectionPool(host='hooks.{d}', port=443): Max retries exceeded "
     "with url: /errands (Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object>: Failed to "
     "establish a new connection: [Errno 111] Connection refused'))", 18),
    ("requests.exceptions.HTTPError", "410 Client Error: Gone for url: https://hooks.{d}/errands", 6),
    ("requests.exceptions.HTTPError", "500 Server Error: Internal Server Error for url: https://hooks.{d}/errands", 8),
    ("requests.exceptions.ReadTimeout", "HTTPSConnectionPool(host='hooks.{d}', port=443): Read timed out. "
     "(read timeout=10)", 7),
    ("smtplib.SMTPRecipientsRefused", "{{'{e}': (550, b'5.1.1 The email account that you tried to reach does "
     "not exist')}}", 9),
    ("smtplib.SMTPDataError", "(451, b'4.7.1 Try again later: rate limited')", 4),
    ("errands.JobTimeout", "the run took longer than its timeout of 120s and was killed", 5),
    ("errands.WorkerLost", "the worker process running it died (signal 9: SIGKILL, out of memory?)", 3),
    ("PIL.UnidentifiedImageError", "cannot identify image file <_io.BytesIO object at 0x7f3a2c1e9f30>", 5),
    ("botocore.exceptions.ClientError", "An error occurred (NoSuchKey) when calling the GetObject operation: "
     "The specified key does not exist.", 4),
    ("stripe.error.CardError", "Your card was declined. (decline_code: {c})", 6),
    ("stripe.error.RateLimitError", "Too many requests made to the API too quickly", 2),
    ("psycopg.errors.UniqueViolation", "duplicate key value violates unique constraint \"exports_pkey\"\n"
     "DETAIL:  Key (id)=(1234) already exists.", 2),
    ("KeyError", "'customer'", 3),
    ("ValueError", "invalid literal for int() with base 10: 'N/A'", 2),
    ("RuntimeError", "CRM answered 429 Too Many Requests; retry after 60 s", 4),
]
"""(type, message, weight); {d} {e} {c} vary, so there are a few dozen distinct messages."""


def _error(rng: random.Random, variant: int) -> tuple[str, str]:
    kinds = [e for e in ERRORS for _ in range(e[2])]
    kind, message, _ = kinds[variant % len(kinds)]
    text = message.format(d=DOMAINS[variant % 3], e=f"{FIRST[variant % 4]}@{DOMAINS[0]}",
                          c=("insufficient_funds", "expired_card")[variant % 2])
    if variant % 5 == 0:  # a traceback tail: the part beyond 200 characters differs per entry
        text += ("\n\nTraceback (most recent call last):\n  File \"app/jobs.py\", line "
                 f"{rng.randrange(20, 900)}, in run\n    raise\n" + " " * rng.randrange(4))
    return kind, text


# ---------------------------------------------------------------------------- filling


@dataclass
class Filled:
    ready: list[int] = field(default_factory=list)
    delayed: list[int] = field(default_factory=list)
    retrying: list[int] = field(default_factory=list)
    blocked: list[int] = field(default_factory=list)
    running: dict[str, list[int]] = field(default_factory=dict)
    stale: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    rare_id: int = 0
    workers_alive: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def _chunks(values: list[Any], size: int) -> list[list[Any]]:
    return [values[i:i + size] for i in range(0, len(values), size)]


def fill(app: Errands, jobs: int, dead: int, seed: int = 7, log: Any = print) -> Filled:
    """Fill the database (see the module's docstring for what a busy installation holds)."""
    rng = random.Random(seed)
    store = app.store
    app.migrate()
    out = Filled()
    names = [n for n, w in JOB_MIX for _ in range(w)]
    defs = {n: app.get_job(n) for n, _ in JOB_MIX}
    t0 = time.perf_counter()
    now = datetime.now(timezone.utc)
    blocked_n = min(5_000, max(1, jobs // 200))  # 5,000 of a million
    plain = max(jobs - blocked_n, 1)
    total = plain + dead
    rounds = max(1, total // 10_000)
    dead_cols = "id, queue, name, payload, priority, attempts, max_attempts, timeout, created_at, failed_at, " \
                "error_type, error_message"
    dead_sql = store.dialect.q("INSERT INTO {failed} (" + dead_cols + ") VALUES (" + ", ".join(["{p}"] * 12) + ")")
    made = 0
    dead_made = 0
    for r in range(rounds):
        size = total // rounds + (1 if r < total % rounds else 0)
        lag = timedelta(days=2) * (1 - r / rounds)  # older rounds were due longer ago
        batch: list[NewJob] = []
        for _ in range(size):
            name = rng.choice(names)
            args, kwargs = _job_args(rng, name)
            job = defs[name].prepare(*args, **kwargs)
            p = rng.random()
            if p < 0.08:
                job = job._replace(priority=rng.choice((5, 10, -1)))
            if rng.random() < 0.25:
                job = job._replace(delay=rng.uniform(60, 3 * 86400))
            else:
                job = job._replace(run_at=now - lag - timedelta(seconds=rng.uniform(0, 600)))
            batch.append(job)
        if r == rounds // 2 and batch:  # the one job a support person will look for
            batch[0] = defs["send_email"].prepare(to=RARE_EMAIL, subject="Your order #424242 has shipped",
                                                  template="order_shipped")
        ids = [h.id for h in app.enqueue_many(batch)]
        if r == rounds // 2 and ids:
            out.rare_id = ids[0]
        # Dead-letter entries share the id sequence with the jobs, so their ids interleave.
        want_dead = (dead * (r + 1)) // rounds - dead_made
        picks = sorted(rng.sample(range(1 if r == rounds // 2 else 0, len(ids)), min(want_dead, len(ids) - 1)))
        rows = []
        failed_at_base = now - timedelta(days=7) * (1 - (r + 0.5) / rounds)
        for k, i in enumerate(picks):
            job = batch[i]
            variant = rng.randrange(36) if rng.random() < 0.85 else rng.randrange(36, 1000)
            etype, emsg = _error(rng, variant)
            failed_at = failed_at_base + timedelta(seconds=k * 600 / max(len(picks), 1))
            rows.append((ids[i], job.queue, job.name, job.payload, job.priority, job.max_attempts, job.max_attempts,
                         job.timeout, store.dialect.from_datetime(failed_at - timedelta(minutes=rng.uniform(1, 90))),
                         store.dialect.from_datetime(failed_at), etype, emsg))
        if rows:
            gone = [row[0] for row in rows]

            def move(cur: Any, rows: list[tuple[Any, ...]] = rows, gone: list[int] = gone) -> None:
                cur.executemany(dead_sql, rows)
                for part in _chunks(gone, 1000):
                    cur.execute(store.dialect.q("DELETE FROM {jobs} WHERE id IN (") + store.dialect.marks(part) + ")",
                                part)

            store.db.run(move, write=True)
            dead_made += len(rows)
            out.dead += gone
        dead_set = set(picks)
        for i, (job_id, job) in enumerate(zip(ids, batch, strict=True)):
            if i not in dead_set:
                (out.delayed if job.delay else out.ready).append(job_id)
        made += len(ids) - len(rows)
        if r % max(1, rounds // 10) == 0:
            log(f"  filled {made:,} jobs and {dead_made:,} dead ({time.perf_counter() - t0:.0f}s)")
    out.seconds["jobs_and_dead"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    # Jobs waiting for a retry: delayed, one or two attempts made, the last error kept.
    out.retrying = rng.sample(out.delayed, min(2_000, len(out.delayed) // 4))
    for part in _chunks(sorted(out.retrying), 500):
        etype, emsg = _error(rng, rng.randrange(36))
        store.db.run(lambda cur, part=part, e=f"{etype}: {emsg}": cur.execute(store.dialect.q(
            "UPDATE {jobs} SET attempts = 1, last_error = {p} WHERE id IN (") + store.dialect.marks(part) + ")",
            [e, *part]),
            write=True)
    # Blocked jobs: each waits for a delayed job (so it stays blocked), through the public API.
    if out.delayed:
        parents = (rng.sample(out.delayed, blocked_n) if len(out.delayed) >= blocked_n
                   else [rng.choice(out.delayed) for _ in range(blocked_n)])
        blocked = [defs["send_email"].prepare(**_job_args(rng, "send_email")[1])._replace(after=(p,)) for p in parents]
        for part in _chunks(blocked, 1000):
            out.blocked += [h.id for h in app.enqueue_many(part)]
    # Workers: six alive (16 running jobs each), two dead whose leases expired (stale jobs).
    hosts = [f"worker-{i}.prod.internal" for i in range(8)]
    queues_of = [list(QUEUES)] * 2 + [["mails"], ["webhooks"], ["images", "reports"], ["billing", "default"],
                                      list(QUEUES), ["mails", "webhooks"]]
    ready_pool = rng.sample(out.ready, min(len(out.ready), 1_100))
    for i, host in enumerate(hosts):
        wid = f"{host}:{4000 + i}:{rng.getrandbits(24):06x}"
        store.workers.register(wid, host, 4000 + i, queues_of[i], 16)
        alive = i < 6
        held = [ready_pool.pop() for _ in range(16 if alive else 200) if ready_pool]
        for part in _chunks(held, 500):
            if alive:
                sql = ("UPDATE {jobs} SET reserved_by = {p}, reserved_at = {now}, reserved_until = {now_plus}, "
                       "attempts = attempts + 1 WHERE id IN (")
                params: list[Any] = [wid, LEASE]
            else:
                sql = ("UPDATE {jobs} SET reserved_by = {p}, reserved_at = {now_plus}, reserved_until = {now_plus}, "
                       "attempts = attempts + 1 WHERE id IN (")
                params = [wid, -1800.0, -1800.0 + LEASE]
            store.db.run(lambda cur, sql=sql, params=params, part=part: cur.execute(
                store.dialect.q(sql) + store.dialect.marks(part) + ")", [*params, *part]), write=True)
        if alive:
            out.running[wid] = held
            out.workers_alive.append(wid)
        else:
            out.stale += held
            store.db.run(lambda cur, wid=wid: cur.execute(store.dialect.q(
                "UPDATE {workers} SET started_at = {now_plus}, heartbeat_at = {now_plus} WHERE id = {p}"),
                (-86400.0, -1800.0, wid)), write=True)
    taken = {j for ids in out.running.values() for j in ids} | set(out.stale)
    out.ready = [i for i in out.ready if i not in taken]
    out.seconds["states"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    # Throughput per minute and queue for the last seven days (workers write these as they run).
    minute0 = now.replace(second=0, microsecond=0)
    stats = []
    for m in range(1, 7 * 1440 + 1):
        at = store.dialect.from_datetime(minute0 - timedelta(minutes=m))
        daily = 1.0 + 0.8 * ((m // 60) % 24 in range(8, 20))
        for q in QUEUES:
            ok = int(rng.expovariate(1 / (40 * daily)))
            stats.append((at, q, ok, int(ok * rng.uniform(0, 0.04))))
    stats_sql = store.dialect.q("INSERT INTO {stats} (minute, queue, succeeded, failed) VALUES ({p}, {p}, {p}, {p})")
    for part in _chunks(stats, 5_000):
        store.db.run(lambda cur, part=part: cur.executemany(stats_sql, part), write=True)
    # An audit log of a busy month.
    actions = (("retry", "dead-letter entries retried"), ("forget", "dead-letter entries forgotten"),
               ("pause", None), ("resume", None), ("enqueue", "send_email x1"), ("recover", None),
               ("cancel", "cancelled"), ("run-now", "periodic nightly_rollup"))
    audit = []
    for k in range(20_000):
        action, detail = rng.choice(actions)
        at = now - timedelta(days=30) + timedelta(seconds=k * 30 * 86400 / 20_000)
        target = f"queue {rng.choice(QUEUES)}" if action in ("pause", "resume") else f"jobs {rng.randrange(10**6)}"
        actor = rng.choice(("ops-anna", "ops-bert", "oncall", USER))
        audit.append((store.dialect.from_datetime(at), actor, action, target, detail))
    audit_sql = store.dialect.q("INSERT INTO {audit} (at, actor, action, target, detail) "
                                "VALUES ({p}, {p}, {p}, {p}, {p})")
    for part in _chunks(audit, 5_000):
        store.db.run(lambda cur, part=part: cur.executemany(audit_sql, part), write=True)
    # The schedules have run before; one queue is paused.
    for schedule in app.schedules.values():
        slot = now - timedelta(hours=1)
        store.features.claim_periodic_slot(schedule.name, slot, schedule.prepare(slot.isoformat()))
    app.pause_queue(PAUSED_QUEUE)
    out.seconds["history"] = time.perf_counter() - t2
    return out


def analyze(app: Errands, backend: str) -> float:
    """The statistics a running server would have by itself."""
    t0 = time.perf_counter()
    store = app.store
    if backend == "postgres":
        store.db.run(lambda cur: cur.execute("VACUUM (ANALYZE)"))
    elif backend == "mariadb":
        def run(cur: Any) -> None:
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
            for (table,) in cur.fetchall():
                cur.execute(f"ANALYZE TABLE `{table}`")
                cur.fetchall()

        store.db.run(run)
    return time.perf_counter() - t0


class LiveWorkers(threading.Thread):
    """What live workers do to the database while someone looks at the dashboard: heartbeats,
    lease extensions and this minute's throughput, every few seconds."""

    def __init__(self, app: Errands, running: dict[str, list[int]], period: float = 5.0) -> None:
        super().__init__(daemon=True, name="live-workers")
        self.app, self.running, self.period = app, running, period
        self.stopping = threading.Event()
        self.errors: list[str] = []

        self.done = 0

    def beat(self) -> None:
        store = self.app.store
        for wid, ids in self.running.items():
            self.done += 3
            store.workers.heartbeat(wid, self.done)
            store.jobs.extend_leases(wid, ids, LEASE)
        store.insights.add_stats({(q, True): 7 for q in QUEUES} | {("webhooks", False): 1})

    def run(self) -> None:
        while not self.stopping.wait(self.period):
            try:
                self.beat()
            except Exception as exc:  # reported at the end, never fatal
                self.errors.append(repr(exc))
        self.app.store.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


# ---------------------------------------------------------------------------- serving and timing


def serve(url: str, port: int) -> None:
    """The server side (a subprocess): the real dashboard under uvicorn, one process."""
    import uvicorn

    from errands.dashboard import AuthSettings, create_dashboard

    app = build_app(url)
    # Plain HTTP on the loopback: the session cookie must not be Secure, or no client sends it back.
    dashboard = create_dashboard(app, settings=AuthSettings(secure_cookies=False))
    uvicorn.run(dashboard, host="127.0.0.1", port=port, log_level="warning", access_log=False)


class Client:
    """A logged-in browser, minus the browser: one keep-alive connection, the session cookie."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes, float]:
        hdrs = {"Accept": "text/html,application/json", **(headers or {})}
        if self.cookies:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        for attempt in range(2):
            t0 = time.perf_counter()
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                response = self.conn.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                if attempt:
                    raise
                continue
            elapsed = time.perf_counter() - t0
            for value in response.headers.get_all("Set-Cookie") or []:
                jar: SimpleCookie = SimpleCookie()
                jar.load(value)
                for key, morsel in jar.items():
                    self.cookies[key] = morsel.value
            return response.status, data, elapsed
        raise AssertionError("unreachable")

    def login(self) -> None:
        status, _, _ = self.request("POST", "/login", urlencode({"username": USER, "password": PASSWORD}),
                                    {"Content-Type": "application/x-www-form-urlencoded"})
        if status != 303 or "errands_session" not in self.cookies:
            raise RuntimeError(f"login failed (HTTP {status}, cookies {sorted(self.cookies)})")

    def close(self) -> None:
        self.conn.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(url: str) -> tuple[subprocess.Popen[bytes], int, str]:
    port = _free_port()
    log = os.path.join(tempfile.gettempdir(), f"errands-dashboard-bench-{port}.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", "--url", url,
                                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the dashboard server exited ({proc.returncode}): {open(log).read()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, port, log
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the dashboard server did not listen within 60 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def select_one_timer(url: str) -> Any:
    """A bare ``SELECT 1`` round trip on the backend's own driver (a peer for the ratios)."""
    app = Errands(url)
    store = app.store

    def once() -> float:
        t0 = time.perf_counter()
        store.db.run(lambda cur: (cur.execute("SELECT 1"), cur.fetchall()))
        return time.perf_counter() - t0

    return once, store


def pages(info: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, path) of everything a person or a scraper asks for."""
    mid = info["middle_id"]
    out = [
        ("peer: /healthz", "/healthz"),
        ("overview", "/"), ("overview 24h", "/?window=24h"), ("overview 7d", "/?window=7d"),
        ("jobs", "/jobs"),
        *((f"jobs state={s}", f"/jobs?state={s}") for s in ("ready", "delayed", "blocked", "running", "stale")),
        ("jobs queue=billing", "/jobs?queue=billing"),
        ("jobs queue=mails state=delayed", "/jobs?queue=mails&state=delayed"),
        ("jobs name=charge", "/jobs?name=charge"),
        ("jobs name=<absent>", "/jobs?name=no_such_job"),
        ("jobs q=<common>", f"/jobs?q={COMMON_TEXT}"),
        ("jobs q=<one job>", "/jobs?" + urlencode({"q": RARE_EMAIL})),
        ("jobs q=<absent>", "/jobs?" + urlencode({"q": ABSENT_TEXT})),
        ("jobs deep page", f"/jobs?before={mid}"),
        ("jobs deep page state=delayed", f"/jobs?state=delayed&before={mid}"),
        ("job ready", f"/jobs/{info['ready_id']}"), ("job blocked", f"/jobs/{info['blocked_id']}"),
        ("job running", f"/jobs/{info['running_id']}"), ("job dead", f"/jobs/{info['dead_id']}"),
        ("dead", "/dead"), ("dead q=<common>", "/dead?q=Connection+refused"),
        ("dead q=<absent>", "/dead?" + urlencode({"q": ABSENT_TEXT})),
        ("dead queue=billing", "/dead?queue=billing"), ("dead deep page", f"/dead?before={info['dead_middle_id']}"),
        ("stale", "/stale"), ("workers", "/workers"), ("queues", "/queues"), ("periodic", "/periodic"),
        ("enqueue", "/enqueue"), ("audit", "/audit"), ("users", "/users"),
        ("api overview", "/api/overview"), ("api jobs", "/api/jobs"),
        ("api jobs limit=500", "/api/jobs?limit=500"),
        ("api jobs q=<absent>", "/api/jobs?" + urlencode({"q": ABSENT_TEXT})),
        ("api dead", "/api/dead"), ("api workers", "/api/workers"), ("api queues", "/api/queues"),
        ("metrics", "/metrics"),
        ("api find", f"/api/find?id={info['dead_id']}"),
        ("queues 7d", "/queues?window=7d"), ("chart 7d", "/charts/throughput?window=7d"),
        ("api activity", "/api/activity"),
    ]
    return [(label, path) for label, path in out if not path.rstrip("/").endswith("/0")]


def _stats(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    p95 = ms[min(len(ms) - 1, max(0, round(0.95 * len(ms)) - 1))]
    return {"median_ms": round(statistics.median(ms), 4), "p95_ms": round(p95, 4), "max_ms": round(ms[-1], 4),
            "min_ms": round(ms[0], 4)}


def time_pages(port: int, url: str, info: dict[str, Any], reps: int, warmup: int, only: str | None,
               log: Any = print) -> dict[str, Any]:
    client = Client(port)
    client.login()
    select_one, peer_store = select_one_timer(url)
    results: dict[str, Any] = {}
    try:
        todo = [(label, path) for label, path in pages(info)
                if only is None or label.startswith("peer") or only in label or only in path]
        # Round-robin over the pages, so a burst of noise on this shared machine spreads over all of
        # them instead of landing on one.
        samples: dict[str, list[float]] = {label: [] for label, _ in todo}
        meta: dict[str, dict[str, Any]] = {}
        sel: list[float] = []
        for rep in range(warmup + reps):
            for label, path in todo:
                status, body, elapsed = client.request("GET", path)
                if status != 200:
                    raise RuntimeError(f"{path}: HTTP {status}: {body[:300]!r}")
                if rep >= warmup:
                    samples[label].append(elapsed)
                meta[label] = {"path": path, "bytes": len(body)}
            for _ in range(3):
                t = select_one()
                if rep >= warmup:
                    sel.append(t)
            if rep == warmup - 1 or (rep >= warmup and (rep - warmup + 1) % 5 == 0):
                log(f"  round {rep + 1}/{warmup + reps} done")
        select_stats = _stats(sel)
        health = statistics.median(samples["peer: /healthz"]) * 1000
        for label, _ in todo:
            s = _stats(samples[label])
            s["over_healthz"] = round(s["median_ms"] / health, 1)
            s["over_select1"] = round(s["median_ms"] / max(select_stats["median_ms"], 0.001), 1)
            s["over_budget"] = s["median_ms"] > BUDGET_MS
            results[label] = {**meta[label], **s}
        return {"pages": results, "select1": select_stats, "healthz_median_ms": round(health, 2)}
    finally:
        client.close()
        peer_store.close()


# ---------------------------------------------------------------------------- report


def _commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        return sha + ("+dirty(src)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table(report: dict[str, Any]) -> str:
    lines = [f"Dashboard pages, {report['backend']} ({report['server_version']}), {report['jobs']:,} jobs and "
             f"{report['dead']:,} dead, {report['reps']} requests each after {report['warmup']} warm-up rounds",
             f"{report['started']} commit {report['commit']}; budget {BUDGET_MS:.0f} ms a page (median); "
             f"peers: /healthz {report['timing']['healthz_median_ms']:.2f} ms, SELECT 1 "
             f"{report['timing']['select1']['median_ms']:.3f} ms (median)", "",
             "| page | path | median ms | p95 ms | max ms | x /healthz | x SELECT 1 | KiB |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for label, r in report["timing"]["pages"].items():
        mark = " **over budget**" if r["over_budget"] else ""
        lines.append(f"| {label}{mark} | `{r['path'][:60]}` | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | "
                     f"{r['max_ms']:.1f} | {r['over_healthz']:.1f} | {r['over_select1']:.0f} | "
                     f"{r['bytes'] / 1024:.0f} |")
    slow = [k for k, r in report["timing"]["pages"].items() if r["over_budget"]]
    lines += ["", f"Slowest median: {max(r['median_ms'] for r in report['timing']['pages'].values()):.1f} ms; "
              + (f"over budget: {', '.join(slow)}" if slow else "no page over budget")]
    if report.get("fill"):
        f = report["fill"]
        parts = ", ".join(f"{k} {v:.0f} s" for k, v in f["seconds"].items())
        rows = ", ".join(f"{k} {v:,}" for k, v in f["counts"].items())
        lines.append(f"Filled in {sum(f['seconds'].values()):.0f} s ({parts}); rows: {rows}")
    return "\n".join(lines) + "\n"


def _server_version(app: Errands, backend: str) -> str:
    if backend == "sqlite":
        import sqlite3

        return f"SQLite {sqlite3.sqlite_version}"
    row = app.store.db.run(lambda cur: (cur.execute("SELECT version()"), cur.fetchone())[1])
    text = str(row[0])
    return text.split(" on ")[0] if backend == "postgres" else f"MariaDB/MySQL {text}"


def _count_rows(app: Errands) -> dict[str, int]:
    store = app.store

    def read(cur: Any) -> dict[str, int]:
        out = {}
        for key, table in (("jobs", "{jobs}"), ("dead", "{failed}"), ("stats", "{stats}"), ("audit", "{audit}"),
                           ("workers", "{workers}")):
            cur.execute(store.dialect.q(f"SELECT COUNT(*) FROM {table}"))
            out[key] = int(cur.fetchone()[0])
        return out

    return store.db.run(read)


def _probe_ids(app: Errands, filled: Filled | None) -> dict[str, Any]:
    """Ids the detail and deep-page requests use (read back, so ``--reuse`` works too)."""
    store = app.store

    def read(cur: Any) -> dict[str, Any]:
        def one(sql: str, *params: Any) -> int:
            cur.execute(store.dialect.q(sql), params)
            row = cur.fetchone()
            return int(row[0]) if row and row[0] is not None else 0

        lo, hi = one("SELECT MIN(id) FROM {jobs}"), one("SELECT MAX(id) FROM {jobs}")
        dlo, dhi = one("SELECT MIN(id) FROM {failed}"), one("SELECT MAX(id) FROM {failed}")
        return {
            "middle_id": (lo + hi) // 2, "dead_middle_id": (dlo + dhi) // 2,
            "ready_id": one("SELECT MIN(id) FROM {jobs} WHERE reserved_by IS NULL AND blocked_by IS NULL "
                            "AND available_at <= {now} AND id > {p}", (lo + hi) // 2),
            "blocked_id": one("SELECT MAX(id) FROM {jobs} WHERE blocked_by IS NOT NULL"),
            "running_id": one("SELECT MIN(id) FROM {jobs} WHERE reserved_by IS NOT NULL AND reserved_until > {now}"),
            "dead_id": dhi,
        }

    return store.db.run(read)


def fill_scratch(app: Errands, url: str, backend: str, jobs: int, dead: int) -> tuple[Filled, dict[str, Any]]:
    """Fill a scratch database, add the bench's admin (``USER``) and gather the statistics a running
    server would have; what the fill took and the rows it left, for the report.  Shared with
    bench/dashboard_load.py, which loads the same database with many concurrent operators."""
    from errands.services.passwords import hash_password

    print(f"filling {url}: {jobs:,} jobs, {dead:,} dead ...", file=sys.stderr)
    filled = fill(app, jobs, dead, log=lambda m: print(m, file=sys.stderr))
    app.store.accounts.create_user(USER, hash_password(PASSWORD), "admin")
    filled.seconds["analyze"] = analyze(app, backend)
    report = {"seconds": {k: round(v, 1) for k, v in filled.seconds.items()}, "counts": _count_rows(app)}
    print(f"  filled: {report}", file=sys.stderr)
    return filled, report


def run(args: argparse.Namespace) -> dict[str, Any]:
    from run import FreshDatabase

    started = datetime.now(timezone.utc)
    db: Any = None
    url = args.reuse
    filled: Filled | None = None
    fill_report: dict[str, Any] | None = None
    if url is None:
        db = FreshDatabase(BACKENDS[args.backend], "dash").__enter__()
        url = db.url
    live: LiveWorkers | None = None
    server = None
    server_log = ""
    try:
        app = build_app(url)
        if args.reuse is None:
            filled, fill_report = fill_scratch(app, url, args.backend, args.jobs, args.dead)
            running = filled.running
        else:  # the live workers of the filling run are those that beat last
            workers = app.store.workers.list_workers()
            newest = max(w.heartbeat_at for w in workers)
            running = {w.id: app.store.jobs.reserved_by(w.id) for w in workers
                       if (newest - w.heartbeat_at).total_seconds() < 600}
        live = LiveWorkers(build_app(url), running)
        live.beat()
        live.start()
        info = _probe_ids(app, filled)
        server, port, server_log = start_server(url)
        print(f"timing the dashboard on port {port} ...", file=sys.stderr)
        try:
            timing = time_pages(port, url, info, args.reps, args.warmup, args.only,
                                log=lambda m: print(m, file=sys.stderr))
        except Exception:
            print(f"the server's log ({server_log}) ends with:\n{open(server_log).read()[-3000:]}", file=sys.stderr)
            raise
        report = {"backend": args.backend, "server_version": _server_version(app, args.backend),
                  "jobs": args.jobs, "dead": args.dead, "reps": args.reps, "warmup": args.warmup,
                  "started": started.strftime("%Y-%m-%d %H:%M UTC"), "commit": _commit(),
                  "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
                  "probe_ids": info, "fill": fill_report, "timing": timing,
                  "live_worker_errors": live.errors[:5]}
        if args.reuse:
            counts = _count_rows(app)
            report["jobs"], report["dead"] = counts["jobs"], counts["dead"]
        app.store.close()
        return report
    finally:
        if server is not None:
            stop_server(server)
            os.unlink(server_log)
        if live is not None:
            live.stop()
        if db is not None:
            if args.keep:
                print(f"kept the database: --reuse '{url}'", file=sys.stderr)
            else:
                db.__exit__(None, None, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    s = sub.add_parser("serve", help="(internal) serve the dashboard for the timing run")
    s.add_argument("--url", required=True)
    s.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="postgres")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs in the jobs table (default 1,000,000)")
    parser.add_argument("--dead", type=int, default=100_000, help="dead-letter entries (default 100,000)")
    parser.add_argument("--reps", type=int, default=15, help="timed requests per page (default 15)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    parser.add_argument("--only", help="time only pages whose label or path contains this")
    parser.add_argument("--keep", action="store_true", help="keep the filled database (prints its URL)")
    parser.add_argument("--reuse", metavar="URL", help="time an already filled database (from --keep)")
    parser.add_argument("--no-save", action="store_true", help="print the table only; write no results file")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.url, args.port)
        return 0
    if args.jobs < 1 or args.dead < 0 or args.reps < 1 or args.warmup < 0:
        parser.error("--jobs and --reps must be positive, --dead and --warmup not negative")
    if args.reuse and args.backend != _backend_of(args.reuse):
        args.backend = _backend_of(args.reuse)
    report = run(args)
    text = table(report)
    print(text)
    if not args.no_save:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        common.save_results(f"dashboard-{stamp}-{report['backend']}", report, text)
    return 0


def _backend_of(url: str) -> str:
    if url.startswith("sqlite"):
        return "sqlite"
    return "postgres" if url.startswith("postgres") else "mariadb"


if __name__ == "__main__":
    sys.exit(main())
