"""The reporting side of ``make bench`` (issue 17): the worker CPU sampler, the ratios to the bare loop and the
chart.  Pure functions on given inputs: no database, no worker, no timing."""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import chart  # noqa: E402
import cpu_time  # noqa: E402
import run  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


def stat_line(pid: int, comm: str, utime: int, stime: int, cutime: int = 0, cstime: int = 0) -> str:
    """A /proc/<pid>/stat line: fields 3-13 are filler, 14-17 the times, then the rest."""
    return f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 3 0\n"


# ---------------------------------------------------------------------------- CPU sampler


def test_stat_ticks_splits_own_time_from_reaped_childrens() -> None:
    assert cpu_time.stat_ticks(stat_line(7, "python", 120, 30, 40, 10)) == (150, 50)


def test_stat_ticks_reads_past_a_command_name_with_spaces_and_parentheses() -> None:
    assert cpu_time.stat_ticks(stat_line(7, "a) b (c", 1, 2, 3, 4)) == (3, 7)


def test_sample_tree_sums_the_worker_tree_and_skips_processes_gone_meanwhile() -> None:
    times = {10: (0.6, 0.1), 11: (4.0, 0.0), 12: None}
    sample = cpu_time.sample_tree(10, handled=42, children=lambda pid: [11, 12], read=times.get, reaped=lambda: 0.25)
    assert sample.seconds == pytest.approx(0.6 + 0.1 + 4.0 + 0.25)
    assert sample.handled == 42
    assert sample.pids == (10, 11)


def test_a_worker_that_exits_inside_the_window_still_counts_through_its_parent() -> None:
    """The child's 3 s before the window end up in the parent's reaped time once it exits: only the 1 s it
    spent inside the window is added."""
    before = cpu_time.sample_tree(1, 1, lambda pid: [2], read={1: (0.1, 0.0), 2: (3.0, 0.0)}.get, reaped=lambda: 0.0)
    after = cpu_time.sample_tree(1, 10_001, lambda pid: [], read={1: (0.1, 4.0)}.get, reaped=lambda: 0.0)
    assert cpu_time.per_job_us(before, after) == pytest.approx(1.0 * 1e6 / 10_000)


def test_the_worker_command_reaped_by_the_benchmark_counts_through_its_rusage() -> None:
    before = cpu_time.sample_tree(1, 0, lambda pid: [], read={1: (2.0, 0.5)}.get, reaped=lambda: 0.0)
    after = cpu_time.sample_tree(1, 100, lambda pid: [], read={}.get, reaped=lambda: 2.6)
    assert cpu_time.per_job_us(before, after) == pytest.approx(0.1 * 1e6 / 100)


def test_per_job_us_is_none_without_jobs_in_the_window() -> None:
    a = cpu_time.CpuSample(seconds=1.0, handled=5, pids=(1,))
    assert cpu_time.per_job_us(a, a) is None
    assert cpu_time.per_job_us(a, cpu_time.CpuSample(1.5, 1005, (1,))) == pytest.approx(500.0)


def test_a_real_process_is_read_from_its_cpu_clock_and_proc() -> None:
    own, children = cpu_time.read_process(os.getpid()) or (-1.0, -1.0)
    assert own > 0 and children >= 0
    assert cpu_time.process_clock_seconds(os.getpid()) is not None
    sample = cpu_time.sample_tree(os.getpid(), 0, children=lambda pid: [])
    assert sample.pids == (os.getpid(),)


# ---------------------------------------------------------------------------- table: CPU columns, bare ratios


def cell(v: float) -> dict:
    return {"status": "ok", "median": v, "runs": [v]}


def test_the_drains_cpu_figure_becomes_its_own_column() -> None:
    raw = {"errands-sqlite": {"drain1": [{"value": 40_000.0, "cpu_us_per_job": 21.5}],
                              "drain2": [{"value": 50_000.0}]}}
    agg = run.aggregate(raw)
    assert agg["errands-sqlite"]["cpu1"]["median"] == 21.5
    assert agg["errands-sqlite"]["cpu2"] == {"status": "not measured"}
    assert agg["errands-sqlite"]["drain1"]["median"] == 40_000.0
    assert "CPU/job 1p (µs)" in run.table(agg, run.Params.make(True, None, None, scale=False))


def sample_agg() -> dict:
    agg = run.aggregate({})
    agg["errands-sqlite"].update(drain1=cell(40_000), cpu1=cell(20.0), latency_p50=cell(3.2))
    agg["bare-sqlite"].update(drain1=cell(200_000), cpu1=cell(4.0))
    agg["huey"].update(drain1=cell(8_000), bulk={"status": "n/a"})
    agg["pgqueuer"].update(drain1={"status": "failed", "reason": "RuntimeError: boom"})
    return agg


def test_bare_rows_give_each_errands_figure_its_ratio_to_the_bare_loop_of_its_database() -> None:
    rows = {(r["backend"], r["figure"]): r for r in run.bare_rows(sample_agg())}
    assert rows[("SQLite", "drain1")]["ratio"] == pytest.approx(0.2)
    assert rows[("SQLite", "cpu1")]["ratio"] == pytest.approx(5.0)
    assert rows[("SQLite", "latency_p50")]["bare"] == "—" and rows[("SQLite", "latency_p50")]["ratio"] is None
    assert ("PostgreSQL", "drain1") not in rows  # errands on PostgreSQL did not run
    assert "| SQLite drain 1p (jobs/s) | 40,000 | 200,000 | 0.20 |" in run.bare_table(list(rows.values()))


def test_chart_panels_group_by_database_and_mark_errands_against_bare() -> None:
    panels = {p.title: p for p in run.chart_panels(sample_agg())}
    drain = {g.title: g.bars for g in panels["drain 1p"].groups}
    assert [(b.label, b.role) for b in drain["SQLite"]] == [("errands", "errands"), ("Huey", "peer"),
                                                            ("bare SQL loop", "bare")]
    assert drain["SQLite"][0].note == "0.20x bare"
    assert drain["PostgreSQL"][0].value is None and drain["PostgreSQL"][0].note.startswith("failed")
    assert not panels["bulk enqueue"].groups[2].bars  # Huey has no bulk enqueue: no bar, not a zero


# ---------------------------------------------------------------------------- chart writer


def test_log_range_spans_whole_decades_with_room_below_the_smallest_bar() -> None:
    assert chart.log_range([10_253, 809_930]) == (1_000, 1_000_000)
    assert chart.log_range([0.9, 136.5]) == pytest.approx((0.1, 1000))
    assert chart.log_range([50, 50]) == (10, 100)
    assert chart.log_range([]) == (1, 10)


def test_render_writes_one_bar_per_figure_longer_for_larger_values() -> None:
    panel = chart.Panel("drain 1p", "jobs/s", True, [
        chart.Group("SQLite <&>", [chart.Bar("errands", 40_000, "errands", "40,000", "0.20x bare"),
                                   chart.Bar("Huey", 8_000, "peer", "8,000"),
                                   chart.Bar("bare SQL loop", 200_000, "bare", "200,000")]),
        chart.Group("Redis", [chart.Bar("Celery", None, "peer", note="failed: boom")]),
        chart.Group("MariaDB", [])])
    svg = chart.render([panel, chart.Panel("CPU/job 2p", "µs", False)], "a \"title\" & more", "line 1\nline 2")
    root = ET.fromstring(svg)  # well-formed, text escaped
    bars = root.findall(f".//{SVG}rect[@class='bar']")
    assert [b.get("data-role") for b in bars] == ["errands", "peer", "bare"]
    widths = [float(b.get("width") or 0) for b in bars]
    assert widths[1] < widths[0] < widths[2]
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert "40,000 (0.20x bare)" in texts and "failed: boom" in texts and "SQLite <&>" in texts
    assert "no figures in this run" in texts and "line 2" in texts
    assert "MariaDB" not in texts  # a group without bars is left out


def test_the_enqueuing_processs_cpu_becomes_the_enqueue_cpu_columns() -> None:
    """Issue 29, goal 1: "report µs per job for enqueue too"; a peer whose script measured none says so."""
    raw = {"errands-pg": {"enqueue": [{"value": 3_000.0, "cpu_us_per_job": 95.0}],
                          "bulk": [{"value": 80_000.0, "cpu_us_per_job": 7.5, "batch": 1000}]},
           "pgqueuer": {"enqueue": [{"value": 2_000.0}]}}
    agg = run.aggregate(raw)
    assert agg["errands-pg"]["cpu_enqueue"]["median"] == 95.0 and agg["errands-pg"]["cpu_bulk"]["median"] == 7.5
    assert agg["pgqueuer"]["cpu_enqueue"] == {"status": "not measured"}
    tbl = run.table(agg, run.Params.make(True, None, None, scale=False))
    assert "CPU/job enqueue (µs)" in tbl and "CPU/job bulk (µs)" in tbl
    assert "CPU/job enqueue" in {p.title for p in run.chart_panels(agg)}


def test_an_enqueue_result_counts_this_processs_cpu_per_job() -> None:
    import common

    started = common.enqueue_clocks()
    sum(i * i for i in range(200_000))  # some CPU for the clock to see
    result = common.enqueue_result(1_000, started, batch=1000)
    assert result["cpu_us_per_job"] > 0 and result["value"] > 0 and result["batch"] == 1000
