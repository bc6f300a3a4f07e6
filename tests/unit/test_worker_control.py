"""The pure parts of worker commands and ``--max-memory`` (errands.worker.control)."""

from __future__ import annotations

from errands.worker.control import command_of, describe, resident_mb


def test_a_worker_state_reads_the_operators_command_with_the_workers_status():
    assert describe(None, None) == "running"
    assert describe("quiet", None) == "quiet requested"
    assert describe("quiet", "quiet") == "quiet"
    assert describe(None, "quiet") == "resume requested"
    assert describe("stop", "quiet") == "stop requested"
    assert describe("stop", "stopping") == describe(None, "stopping") == "stopping"


def test_only_known_commands_are_obeyed():
    assert [command_of(v) for v in ("quiet", "stop", None, "hibernate", 7, "QUIET")] == [
        "quiet", "stop", None, None, None, None]


def test_resident_memory_is_read_in_megabytes():
    used = resident_mb()
    assert used is not None and 1 < used < 100_000
    hoard = b"\x01" * (64 * 2**20)
    after = resident_mb()
    assert after is not None and after > used + 32
    del hoard
