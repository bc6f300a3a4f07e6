"""``store.workers``' commands (schema version 11): an operator's command left in a worker's row, read
back by that worker's heartbeat, which reports what the worker does; on every backend."""

from __future__ import annotations

from errands.store import Store


def test_a_heartbeat_reads_the_command_left_for_its_worker_and_reports_its_status(store: Store) -> None:
    store.workers.register("w1", "host-a", 1, ["default"], 1, lease=30.0, heartbeat_every=10.0)
    store.workers.register("w2", "host-a", 2, ["default"], 1, lease=30.0, heartbeat_every=10.0)
    assert store.workers.heartbeat("w1", 0) is None
    assert store.workers.command("w1", "quiet", (None, "quiet"))
    assert store.workers.command("w1", "quiet", (None, "quiet"))  # again: still held (MySQL counts no change)
    assert store.workers.heartbeat("w1", 3, "quiet") == "quiet"
    assert store.workers.heartbeat("w2", 5) is None  # another worker's row is its own
    rows = {w.id: w for w in store.workers.list_workers()}
    assert (rows["w1"].command, rows["w1"].status, rows["w1"].jobs_done) == ("quiet", "quiet", 3)
    assert (rows["w2"].command, rows["w2"].status) == (None, None)

    assert store.workers.command("w1", None, (None, "quiet"))  # resume
    assert store.workers.heartbeat("w1", 3) is None
    assert store.workers.command("w1", "stop", (None, "quiet", "stop"))
    assert not store.workers.command("w1", "quiet", (None, "quiet"))  # a stop is not taken back
    assert not store.workers.command("w1", None, (None, "quiet"))
    assert store.workers.heartbeat("w1", 4, "stopping") == "stop"
    assert not store.workers.command("gone", "quiet", (None, "quiet"))
    assert store.workers.heartbeat("gone", 1) is None  # a row pruned meanwhile: no command


def test_a_command_the_worker_does_not_know_comes_back_as_the_database_holds_it(store: Store) -> None:
    store.workers.register("w1", "host", 1, ["default"], 1)
    assert store.workers.command("w1", "hibernate", (None,))
    assert store.workers.heartbeat("w1", 0) == "hibernate"  # the worker judges it (control.command_of)
