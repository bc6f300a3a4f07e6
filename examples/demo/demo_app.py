"""The demo's application: three jobs, like the ones a web app defers.

A sign-up form should not wait for the SMTP server, an export should not block a
page, and a partner API that fails now and then should be retried, not lost.

Run the demo with ``make demo`` (or ``python examples/demo/run_demo.py``); it
enqueues jobs, starts ``errands worker`` and shows what happened.  Afterwards you
can point the CLI at the same app::

    PYTHONPATH=examples/demo .venv/bin/errands --app demo_app:app status

Everything the demo writes lives in ``demo-output/`` at the repository root.
"""

from __future__ import annotations

import random
import time
from datetime import datetime, timezone
from pathlib import Path

from errands import Errands, current_job

OUTPUT = Path(__file__).resolve().parents[2] / "demo-output"
OUTBOX = OUTPUT / "outbox"
REPORTS = OUTPUT / "reports"

# SQLite creates its own tables on first use; no `errands migrate` needed.
app = Errands(f"sqlite:///{OUTPUT / 'demo.db'}")


@app.job(name="send_welcome_email", queue="mails", max_attempts=5)
def send_welcome_email(user_id: int, email: str) -> None:
    """Pretend to talk to an SMTP server: write the message into the outbox."""
    time.sleep(random.uniform(0.02, 0.12))  # the slow SMTP round trip the user no longer waits for
    OUTBOX.mkdir(parents=True, exist_ok=True)
    # One file per user: running the job twice rewrites the same file (idempotent: at-least-once delivery).
    (OUTBOX / f"welcome-{user_id:04d}.eml").write_text(
        f"From: Errands Demo <hello@example.com>\n"
        f"To: {email}\n"
        f"Subject: Welcome aboard, user #{user_id}!\n"
        f"Date: {datetime.now(timezone.utc):%a, %d %b %Y %H:%M:%S +0000}\n"
        f"X-Errands-Job: {current_job().id} (attempt {current_job().attempt})\n"
        f"\n"
        f"Hello! Your account is ready. This message was sent by a background job,\n"
        f"so the sign-up page answered in milliseconds.\n",
        encoding="utf-8")


@app.job(name="build_report", queue="reports")
def build_report(name: str, rows: int) -> None:
    """Pretend to crunch numbers: write a small CSV-ish report."""
    time.sleep(random.uniform(0.1, 0.3))
    REPORTS.mkdir(parents=True, exist_ok=True)
    rng = random.Random(name)  # the same report name always gives the same numbers
    lines = [f"# report {name}: {rows} rows, built {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC",
             "day,orders,revenue"]
    lines += [f"{day},{rng.randint(5, 80)},{rng.randint(100, 9000)}" for day in range(1, rows + 1)]
    target = REPORTS / f"{name}.csv"
    tmp = target.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(target)  # appears complete or not at all


class PartnerAPIError(Exception):
    """What a flaky third-party API raises."""


@app.job(name="flaky_sync", queue="sync", max_attempts=3, backoff=[0.5, 1.0])
def flaky_sync(n: int) -> None:
    """Fail 70 % of the time; after 3 attempts the job lands in the dead letter."""
    time.sleep(random.uniform(0.01, 0.05))
    if random.random() < 0.7:
        raise PartnerAPIError(f"partner API answered 503 while syncing record {n} "
                              f"(attempt {current_job().attempt} of {current_job().max_attempts})")
