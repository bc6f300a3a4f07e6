"""The arithmetic of bench/pinned_snapshot.py: per-interval rates and per-claim figures from cumulative
samples, and the summary over the pinned phase (no database, no timing: the figures come from `make bench`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import pinned_snapshot as ps  # noqa: E402


def _sample(t: float, phase: str, n: int, claims: int, seconds: float, scans: int, read: int) -> ps.Sample:
    return ps.Sample(t=t, phase=phase, produced=n, handled=n - 10, claims=claims, claim_seconds=seconds,
                     claim_max_ms=9.0, slow=claims // 10, idx_scan=scans, idx_tup_read=read, start_ms=1.0,
                     start_buffers=100, after_ms=0.05, after_buffers=6, table_mb=1.0, index_mb=0.1, dead=5)


def test_rows_turn_cumulative_samples_into_rates_and_per_claim_figures(tmp_path: Path) -> None:
    run = ps.Run("this", "src", argparse.Namespace(), workdir=str(tmp_path))
    run.samples = [_sample(-5.0, "warm", 0, 0, 0.0, 0, 0),
                   _sample(0.0, "pinned", 5000, 100, 0.1, 100, 2000),
                   _sample(5.0, "pinned", 10000, 300, 0.5, 300, 202000),
                   _sample(10.0, "after", 15000, 400, 0.6, 400, 212000)]
    table = ps.rows(run)
    assert [r["phase"] for r in table] == ["pinned", "pinned", "after"]
    second = table[1]
    assert (second["produced_per_s"], second["drained_per_s"], second["backlog"]) == (1000, 1000, 10)
    assert (second["claims_per_s"], second["claim_ms"], second["entries_per_claim"]) == (40.0, 2.0, 1000.0)
    summary = ps.summary(run, table)
    assert (summary["claim_ms_start"], summary["claim_ms_end"], summary["claim_ms_highest_mean"]) == (1.0, 2.0, 2.0)
    assert (summary["produced"], summary["drained"], summary["throughput_ratio"]) == (10000, 10000, 1.0)
    assert summary["claims"] == 300 and summary["claims_over_2ms"] == 30
    text = ps.markdown([run], {"this": table}, {"this": summary}, "## head")
    assert "| this | 1.0 | 2.0 | 2.0 |" in text
