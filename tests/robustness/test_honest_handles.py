"""Handles say what they know, on every backend: an id no job ever had is UNKNOWN (``result()``
raises JobNotFound at once), and a handle whose name disagrees with the stored job is refused."""

from __future__ import annotations

import pytest

from errands import Errands, JobNotFound, JobState
from errands.core.jobs import JobHandle


def test_unknown_ids_and_wrong_names_are_refused(app: Errands) -> None:
    @app.job(name="add", keep_result=True)
    def add(a: int, b: int) -> int:
        return a + b

    @app.job(name="noop")
    def noop() -> None:
        pass

    kept, plain, dead = add.enqueue(1, 2), noop.enqueue(), add.enqueue(3, 4)  # dead: buried below, unrun
    app.store.endings.bury(None, dead.id, "ValueError", "buried by the test")
    app.run_until_empty()

    assert kept.status() is JobState.SUCCEEDED and kept.result(timeout=5) == 3
    assert plain.status() is JobState.FINISHED and plain.result(timeout=5) is None  # ran; no result kept

    for job_id in (999_999, 2**63 - 1, 2**70, 0, -5):
        stranger = JobHandle(app, job_id, "anything")
        assert stranger.status() is JobState.UNKNOWN
        with pytest.raises(JobNotFound, match="was ever enqueued"):
            stranger.result(timeout=5)

    for handle, state in ((kept, "succeeded"), (plain, None), (dead, "failed")):
        impostor = JobHandle(app, handle.id, "not-its-name")
        if state is None:
            # Finished without a record: nothing is left to compare the name with.
            assert impostor.status() is JobState.FINISHED
            continue
        with pytest.raises(JobNotFound, match="not 'not-its-name'"):
            impostor.status()
        with pytest.raises(JobNotFound, match="not 'not-its-name'"):
            impostor.result(timeout=5)


def test_a_waiting_job_with_another_name_is_refused(app: Errands) -> None:
    @app.job(name="later")
    def later() -> None:
        pass

    handle = later.using(delay=60).enqueue()
    assert handle.status() is JobState.DELAYED
    with pytest.raises(JobNotFound):
        JobHandle(app, handle.id, "other").status()
