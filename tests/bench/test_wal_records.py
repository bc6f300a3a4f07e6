"""The grouping of bench/wal_records.py (``costs.py --wal-records``): which records are the measured
database's, and their sums (no database: the records are given as pg_walinspect returns them)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import wal_records  # noqa: E402


class Rows:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows
        self.params: tuple[Any, ...] = ()

    def execute(self, sql: str, params: tuple[Any, ...]) -> Rows:
        self.params = params
        return self

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


def test_the_databases_records_and_its_commits_are_grouped_the_rest_is_other():
    ours, theirs = "blkref #0: rel 1663/500/9001 fork main blk 3", "blkref #0: rel 1663/777/9001 fork main blk 3"
    conn = Rows([
        ("Heap", "UPDATE", 10, 216, 0, ours), ("Heap", "UPDATE", 10, 224, 0, ours),
        ("Btree", "INSERT_LEAF", 10, 64, 0, "blkref #0: rel 1663/500/9002 fork main blk 1 (FPW)"),
        ("Transaction", "COMMIT", 10, 40, 0, ""),  # our transaction's commit: ours
        ("Heap", "UPDATE", 11, 300, 8000, theirs), ("Transaction", "COMMIT", 11, 40, 0, ""),  # another database's
        ("XLOG", "CHECKPOINT_ONLINE", 0, 120, 0, ""), ("Heap", "LOCK", 10, 56, 4000, "blkref #0: rel 1663/500/1 x")])
    groups = wal_records.breakdown(conn, 2**32 + 16, 2**32 + 4096, 500, {9001: "jobs", 9002: "jobs_pkey"})
    assert conn.params == ("1/10", "1/1000")
    by = {(g["rmgr"], g["type"], g["relation"]): (g["records"], g["bytes"], g["fpi_bytes"]) for g in groups}
    assert by == {("Heap", "UPDATE", "jobs"): (2, 440, 0), ("Btree", "INSERT_LEAF", "jobs_pkey"): (1, 64, 0),
                  ("Transaction", "COMMIT", "-"): (1, 40, 0), ("Heap", "LOCK", "catalog/other relation"): (1, 56, 4000),
                  ("other, server-wide", "", "-"): (3, 460, 8000)}
    table = wal_records.table(groups, 2)
    assert "| **this database's records + its commits** | | | **300.0** | |" in table  # (440 + 64 + 40 + 56) / 2
