"""examples/celery_port: the Celery canvas app ported to errands runs as the Celery one would,
on every backend (chord into a chain with results passed on, retry on one exception type only,
the error callback with the failed job's record)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import drain

from errands import JobState

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "celery_port" / "tasks.py"


@pytest.fixture
def port(db_url: str) -> Iterator[Any]:
    spec = importlib.util.spec_from_file_location("errands_example_celery_port", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.app.use_database(db_url)
    module.app.migrate()
    try:
        yield module
    finally:
        module.app.store.close()
        sys.modules.pop(spec.name, None)


def test_the_report_chain_passes_each_result_on(port, capsys):
    handle = port.monthly_report(["north", "south", "east", "west"], "boss@example.com")
    drain(port.app)
    assert handle.jobs[-1].result(timeout=0) == len("Total sales: 525 EUR")
    assert "to boss@example.com: Total sales: 525 EUR" in capsys.readouterr().out
    assert handle.status().finished and handle.status().failed == 0


def test_only_connection_errors_retry_and_the_error_callback_gets_the_record(port, capsys):
    handle = port.monthly_report(["north", "atlantis"], "boss@example.com")  # KeyError: not retried
    drain(port.app)
    dead = handle.jobs[1]
    assert dead.status() is JobState.FAILED
    assert port.app.store.jobs.get_failed(dead.id).attempts == 1  # straight to the dead letter
    assert all(h.status() is JobState.BLOCKED for h in handle.jobs[2:])  # the rest waits, visible
    assert "report failed: KeyError: 'atlantis'" in capsys.readouterr().out
    policy = port.fetch_sales.behaviour.policy
    assert policy.retries(ConnectionError("down")) and not policy.retries(KeyError("atlantis"))

    port.SALES["atlantis"] = [1]  # fixed: retrying the dead fetch resumes the report where it stopped
    port.app.retry_failed(dead.id)
    drain(port.app)
    assert handle.jobs[-1].result(timeout=0) == len("Total sales: 201 EUR")
