"""Workflow promises with several real worker processes, on every backend: a step never starts
before all its dependencies succeeded, a fan-in runs exactly once when its last members end at
the same moment on different workers, a 1,000-step fan-out/fan-in gets the right result, and
killing the workers (SIGKILL) mid-workflow loses no step."""

from __future__ import annotations

import signal
from typing import Any

import feature_jobs
import pytest
from helpers import wait_for
from test_many_processes import _rows, events

from errands import Errands, JobState, group

pytestmark = pytest.mark.slow


def _fan_in(app: Errands, members: int, tag: str) -> tuple[Any, Any, Any]:
    wf = app.workflow(tag)
    parts = wf.add(group(*[feature_jobs.wf_part.prepare(n) for n in range(members)]))
    total = wf.add(feature_jobs.wf_total.s(tag), after=[parts], results=True)
    return wf.enqueue(), parts, total


def _spans(app: Errands, table: str = "feature_events") -> dict[int, list[tuple[float, float]]]:
    """Every recorded run of every job: (started, ended) by job id."""
    def read(cur: Any) -> dict[int, list[tuple[float, float]]]:
        cur.execute(f"SELECT job_id, started_at, ended_at FROM {table}")
        out: dict[int, list[tuple[float, float]]] = {}
        for job_id, started, ended in cur.fetchall():
            out.setdefault(int(job_id), []).append((float(started), float(ended)))
        return out

    return app.store.db.run(read)


def test_fan_ins_run_once_after_every_member_and_a_thousand_steps_sum_right(fapp, spawn):
    big = _fan_in(fapp, 1000, "big")
    small = [_fan_in(fapp, 150, f"small-{i}") for i in range(2)]
    for _ in range(2):
        spawn("-p", "2", "-c", "2", "--queue", "default")
    for handle, _, _ in [big, *small]:
        wait_for(lambda h=handle: fapp.workflows.status(h.id).batch.finished, timeout=240,
                 message=f"workflow {handle.id} to finish")
    wait_for(lambda: _rows(fapp, "SELECT COUNT(*) FROM {jobs}")[0][0] == 0, message="every job to be done")
    totals = [(tag, job_id) for job_id, tag, _, _ in events(fapp, "wf_total")]
    assert sorted(tag for tag, _ in totals) == ["big", "small-0", "small-1"]  # each fan-in ran exactly once
    assert big[2].job.result(timeout=0) == sum(n * n for n in range(1000))
    assert all(total.job.result(timeout=0) == sum(n * n for n in range(150)) for _, _, total in small)
    spans = _spans(fapp)
    for _, parts, total in [big, *small]:
        [(started, _)] = spans[total.job.id]
        assert started >= max(end for job in parts.jobs for _, end in spans[job.id])
    assert fapp.workflows.status(big[0].id).state == "succeeded"


def test_killing_every_worker_mid_workflow_loses_no_step(fapp, spawn):
    feature_jobs.ensure_runs_table()
    wf = fapp.workflow("chaos")
    first = wf.add(group(*[feature_jobs.wf_slow.prepare(n) for n in range(120)]))
    middle = wf.add(feature_jobs.wf_sum.s(), after=[first], results=True)
    second = wf.add(group(*[feature_jobs.wf_slow.prepare(n) for n in range(1000, 1060)]), after=[middle])
    last = wf.add(feature_jobs.wf_sum.s(), after=[second], results=True)
    handle = wf.enqueue()
    doomed = [spawn("-p", "1", "-c", "4", lease="2") for _ in range(2)]
    wait_for(lambda: _rows(fapp, "SELECT COUNT(*) FROM feature_runs")[0][0] >= 30, timeout=120,
             message="the first steps to run")
    for proc in doomed:
        proc.send_signal(signal.SIGKILL)  # the supervisor; PR_SET_PDEATHSIG takes its worker along
        proc.wait()
    assert not fapp.workflows.status(handle.id).batch.finished
    for _ in range(2):
        spawn("-p", "1", "-c", "4", lease="2")
    wait_for(lambda: fapp.workflows.status(handle.id).batch.finished, timeout=240, message="the workflow to finish")
    status = fapp.workflows.status(handle.id)
    assert status.state == "succeeded" and all(s.state is JobState.SUCCEEDED for s in status.steps)
    assert len(status.steps) == 182 and status.batch.done == 182
    assert middle.job.result(timeout=0) == sum(range(120))
    assert last.job.result(timeout=0) == sum(range(1000, 1060))
    spans = _spans(fapp, "feature_runs")
    assert set(spans) == {s.job_id for s in status.steps}  # every step ran
    # A step may run twice (its worker died after the run, before settling); its last run still
    # started only after the last run of every step it waits for had ended.
    for step in status.steps:
        for parent in step.parents:
            assert max(s for s, _ in spans[step.job_id]) >= max(e for _, e in spans[parent])
