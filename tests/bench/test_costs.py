"""The arithmetic of bench/costs.py and bench/stmt_count.py, and the bare-leased table of bench/run.py
(no database, no timing: the figures themselves come from `make bench`)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import costs  # noqa: E402
import run  # noqa: E402
import stmt_count  # noqa: E402


def test_a_write_in_autocommit_is_a_commit_and_a_read_is_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "counts"
    monkeypatch.setenv(stmt_count.ENV, str(out))
    conn = object()
    stmt_count.note(conn, "SELECT 1")
    stmt_count.note(conn, "DELETE FROM jobs WHERE id = 1")
    stmt_count.note(conn, "WITH picked AS (SELECT id FROM jobs) UPDATE jobs SET x = 1")
    assert stmt_count.read(str(out)) == {"SELECT": 1, "DELETE": 1, "WITH": 1, "+COMMIT": 2}


def test_a_transaction_commits_once_and_only_if_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "counts"
    monkeypatch.setenv(stmt_count.ENV, str(out))
    conn = object()
    for sql in ("BEGIN IMMEDIATE", "UPDATE jobs SET x = 1", "INSERT INTO t VALUES (1)", "COMMIT",
                "BEGIN", "SELECT 1", "COMMIT"):
        stmt_count.note(conn, sql)
    counts = stmt_count.read(str(out))
    assert counts["+COMMIT"] == 1 and counts["BEGIN"] == 2 and counts["COMMIT"] == 2


def test_sqlite_connections_are_counted_through_their_trace_callback(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "counts"
    monkeypatch.setenv(stmt_count.ENV, str(out))
    monkeypatch.setattr(sqlite3, "connect", sqlite3.connect)  # undone after the test
    stmt_count._wrap_sqlite()
    conn = sqlite3.connect(str(tmp_path / "db"), isolation_level=None)
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.close()
    assert stmt_count.read(str(out)) == {"CREATE": 1, "INSERT": 1, "+COMMIT": 1}


def test_per_job_figures_and_the_idle_share_of_server_wide_counters() -> None:
    phase = {"statements": {"WITH": 40, "DELETE": 60, "+COMMIT": 100}, "seconds": 2.0,
             "server": {"xact_commit": 120.0, "wal_bytes": 20_000_000.0, "tup_inserted": 0.0, "tup_updated": 20_000.0,
                        "tup_deleted": 20_000.0},
             "server_cpu_s": {"backends": 0.4, "background": 0.02}, "idle_per_s": {"wal_bytes": 1000.0}}
    figures = costs.per_job(phase, 20_000)
    assert figures["statements"] == pytest.approx(0.005)
    assert figures["write_commits"] == pytest.approx(0.005)
    assert figures["pg_commits"] == pytest.approx(0.006)
    assert figures["wal_bytes"] == pytest.approx(1000.0)
    assert figures["idle_wal_bytes"] == pytest.approx(0.1)  # 1,000 bytes/s idle x 2 s over 20,000 jobs
    assert figures["server_cpu_us"] == pytest.approx(20.0)
    assert figures["background_cpu_us"] == pytest.approx(1.0)


def test_the_costs_table_gives_the_range_over_repetitions() -> None:
    def run_of(wal: float) -> dict:
        phase = {"statements": {"DELETE": 10}, "server": {"xact_commit": 10.0, "wal_bytes": wal, "tup_inserted": 0.0,
                                                          "tup_updated": 0.0, "tup_deleted": 0.0}}
        return {"enqueue": phase, "drain": phase, "tables": {"n_tup_upd": 1000.0, "n_tup_hot_upd": 1.0}}

    text = costs.table({"errands postgres": [run_of(800_000.0), run_of(900_000.0)]}, 1000)
    assert "| WAL bytes | 800–900 | 800–900 | 1,600–1,800 |" in text
    assert "| HOT share of the updates (PG) | — | — | 0.1% |" in text


def test_errands_is_set_beside_the_bare_leased_loop_of_its_database() -> None:
    agg = run.aggregate({})
    agg["errands-pg"].update(drain1={"status": "ok", "median": 45_000.0, "runs": [45_000.0]})
    agg["bare-leased-pg"].update(drain1={"status": "ok", "median": 50_000.0, "runs": [50_000.0]})
    rows = run.bare_rows(agg, run.LEASED_FOR, run.LEASED_FIGURES)
    assert [(r["backend"], r["figure"], r["ratio"]) for r in rows] == [("PostgreSQL", "drain1", pytest.approx(0.9))]
    assert "| PostgreSQL drain 1p (jobs/s) | 45,000 | 50,000 | 0.90 |" in run.bare_table(rows, "bare leased loop")
