"""An app with the jobs a real deployment has, for the dashboard's layout tests and screenshots
(tests/browser/test_dashboard_layout.py): no worker runs them, except the workflow's steps, drained
in the test's process."""

from __future__ import annotations

import logging

from errands import Errands, current_job

app = Errands(payload_limit=256 * 1024)  # room for the 100 KB argument the layout tests show


@app.job(queue="emails", name="send_invoice")
def send_invoice(customer_id: int, invoice: str, notes: str = "") -> None:
    """Render an invoice and mail it to the customer."""


@app.job(queue="default", max_attempts=5, name="sync_customer")
def sync_customer(customer_id: int, payload: dict | None = None) -> None:
    """Push a customer record to the CRM."""


@app.job(queue="media", timeout=120, name="resize_image")
def resize_image(path: str, sizes: list[int]) -> None:
    """Make thumbnails of an uploaded image."""


@app.job(queue="pipelines", name="pipeline_step")
def pipeline_step(name: str) -> str:
    return name


@app.periodic("0 3 * * *", args=("nightly",), queue="reports", name="build_report")
def build_report(kind: str) -> None:
    """The nightly sales report."""


@app.periodic("*/15 * * * *", timezone="Europe/Paris", queue="default", name="refresh_rates")
def refresh_rates() -> None:
    """Exchange rates, every quarter of an hour."""


@app.job(queue="imports", max_attempts=5, backoff=lambda attempt: 3600.0, name="import_rows")
def import_rows(table: str) -> None:
    """Copy a table in chunks: its first attempt logs, stores a checkpoint, and fails (drained once by
    the layout tests, so the job page shows an attempt's log lines and a checkpoint)."""
    log = logging.getLogger("shop.imports")
    log.setLevel(logging.INFO)  # as an app's logging configuration would (no worker configures it here)
    job = current_job()
    log.info("importing %s from row %s", table, (job.checkpoint_value or {}).get("after_id", 0))
    for after_id in (1000, 2000, 3000):
        job.checkpoint({"after_id": after_id, "table": table})
        log.info("copied rows up to %d", after_id)
    log.warning("row %d has a price that is no number: %s", 3001, "x" * 300)
    raise ValueError(f"row 3001 of {table}: price is no number")
