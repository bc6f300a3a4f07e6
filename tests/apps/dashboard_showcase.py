"""An app with the jobs a real deployment has, for the dashboard's layout tests and screenshots
(tests/browser/test_dashboard_layout.py): no worker runs them, except the workflow's steps, drained
in the test's process."""

from __future__ import annotations

from errands import Errands

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
