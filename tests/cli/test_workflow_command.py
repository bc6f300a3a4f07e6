"""``errands workflow show`` and ``errands workflow cancel`` on every backend (in-process, through
click's runner: the workflow is built and drained in the test's own process)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import drain

from errands.cli import main


@pytest.fixture
def diamond(app: Any) -> Any:
    """fetch -> (ok, broken) -> merge: after a drain, two steps succeeded, one is dead, one blocked."""

    @app.job(name="fetch")
    def fetch(n: int) -> int:
        return n

    @app.job(name="breaks", max_attempts=1)
    def breaks(n: int) -> int:
        if n:
            raise ValueError("it broke")
        return n

    @app.job(name="merge")
    def merge() -> None: ...

    wf = app.workflow("nightly")
    top = wf.add(fetch.prepare(1))
    ok = wf.add(breaks.prepare(0), after=[top])
    bad = wf.add(breaks.prepare(1), after=[top])
    end = wf.add(merge.prepare(), after=[ok, bad])
    handle = wf.enqueue()
    drain(app)
    handle.ids = [r.job.id for r in (top, ok, bad, end)]
    return handle


def _run(app: Any, *args: str) -> Any:
    return CliRunner().invoke(main, ["--database-url", app.store.url, *args], catch_exceptions=False)


def test_show_prints_state_progress_and_every_step(app, diamond):
    done = _run(app, "workflow", "show", str(diamond.id))
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    # A blocked workflow says so rather than a percentage (issue 26).
    assert lines[0] == f"workflow {diamond.id} 'nightly': blocked: 2 of 4 steps succeeded, 1 failed, 1 waiting"
    assert "policy: block" in lines and "steps: 2 succeeded, 1 failed, 1 blocked" in lines
    top, ok, bad, end = diamond.ids
    rows = {int(line.split()[1]): line for line in lines if line[:5].strip().isdigit()}
    assert set(rows) == {top, ok, bad, end}
    assert "failed" in rows[bad] and "ValueError: it broke" in rows[bad]
    assert "blocked" in rows[end] and f"{ok},{bad}" in rows[end]


def test_show_json_is_the_read_model(app, diamond):
    done = _run(app, "workflow", "show", str(diamond.id), "--json")
    data = json.loads(done.stdout)
    assert (data["id"], data["kind"], data["state"], data["total"], data["pending"]) == (
        diamond.id, "workflow", "blocked", 4, 1)
    assert [s["layer"] for s in data["steps"]] == [0, 1, 1, 2]
    assert data["steps"][3]["parents"] == diamond.ids[1:3]


def test_show_limits_the_steps_it_lists(app, diamond):
    done = _run(app, "workflow", "show", str(diamond.id), "--limit", "1")
    assert "... and 3 more steps" in done.stdout


def test_cancel_cancels_what_has_not_run_and_is_audited_as_the_cli(app, diamond):
    done = _run(app, "workflow", "cancel", str(diamond.id))
    assert done.exit_code == 0 and done.stdout == f"workflow {diamond.id}: 1 step(s) cancelled\n"
    assert app.workflows.status(diamond.id).steps[3].state.value == "cancelled"
    [entry] = [a for a in app.store.accounts.audit_log() if a.action == "cancel"]
    assert (entry.actor, entry.target, entry.detail) == ("cli", f"workflow {diamond.id}", "1 step(s) cancelled")


def test_an_unknown_workflow_is_refused_with_exit_code_1(app):
    app.migrate()
    for command in ("show", "cancel"):
        done = CliRunner().invoke(main, ["--database-url", app.store.url, "workflow", command, "999999"])
        assert done.exit_code == 1 and "no workflow, chain or batch has the id 999999" in done.output
    assert _run(app, "workflow", "show", "0").exit_code == 2  # not an id at all: a usage error
