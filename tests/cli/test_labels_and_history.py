"""``errands failed list/show`` and ``errands job show`` with labels and the error history (issue 14)."""

from __future__ import annotations

import json
import logging

import pytest
from helpers import drain, invoke_cli, run_cli


def test_failed_list_and_show_print_labels_and_every_attempt(app, db_url):
    @app.job(name="invoice", max_attempts=2, backoff=0, keep_traceback=True)
    def invoice(n):
        raise ValueError(f"invoice {n} failed")

    dead = invoice.using(label="Invoice #42").enqueue(42)
    waiting = invoice.using(label="Invoice #43", delay=3600).enqueue(43)
    drain(app)
    listed = run_cli(db_url, "failed", "list")
    assert listed.returncode == 0 and "[Invoice #42]" in listed.stdout
    assert json.loads(run_cli(db_url, "failed", "list", "--json").stdout)[0]["label"] == "Invoice #42"
    shown = run_cli(db_url, "failed", "show", str(dead.id))
    assert shown.returncode == 0, shown.stderr
    assert "Invoice #42" in shown.stdout and "attempt 1" in shown.stdout and "attempt 2" in shown.stdout
    assert "Traceback (most recent call last)" in shown.stdout  # the CLI is an operator's tool: it shows them
    as_json = json.loads(run_cli(db_url, "failed", "show", str(dead.id), "--json").stdout)
    assert [e["error_message"] for e in as_json["errors"]] == ["invoice 42 failed"] * 2
    not_dead = run_cli(db_url, "failed", "show", str(waiting.id))
    assert not_dead.returncode != 0 and "not in the dead letter" in not_dead.stderr
    job = json.loads(run_cli(db_url, "job", "show", str(waiting.id), "--json").stdout)
    assert job["label"] == "Invoice #43" and "errors" not in job
    text = run_cli(db_url, "job", "show", str(dead.id)).stdout
    assert "Invoice #42" in text and "attempt 2" in text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_job_show_prints_what_each_attempt_logged(app, db_url):
    log = logging.getLogger("tests.cli.run_logs")
    log.setLevel(logging.INFO)

    @app.job(name="report", max_attempts=2, backoff=0)
    def report(n):
        log.warning("row %d looks odd\nsecond line", n)
        raise ValueError("bad row")

    dead = report.enqueue(3)
    drain(app)
    text = invoke_cli(db_url, "job", "show", str(dead.id)).stdout
    assert "logs:" in text and text.count("WARNING tests.cli.run_logs: row 3 looks odd") == 2
    assert "                    second line" in text  # a record's lines stay under their attempt
    shown = json.loads(invoke_cli(db_url, "job", "show", str(dead.id), "--json").stdout)
    assert [a["attempt"] for a in shown["logs"]] == [1, 2]
    assert "row 3 looks odd" in invoke_cli(db_url, "failed", "show", str(dead.id)).stdout
