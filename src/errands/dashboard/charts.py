"""Throughput charts drawn on the server as SVG (the overview's, and one per queue on the queues page).

Stacked bars per bucket (succeeded below, failed above), a value axis with round ticks, a time axis
in UTC, and a ``<title>`` on every bucket, so hovering (or a screen reader) tells its time span and
both numbers: no JavaScript, no chart library, nothing from a CDN.  Pure, like :mod:`.graph`: the
template ``chart.html`` draws what :func:`throughput_chart` returns, and the colours come from the
stylesheet, so both themes apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..services.models import Throughput

LEFT, RIGHT, TOP, BOTTOM = 44, 8, 8, 22
"""Room for the value axis's labels (left) and the time axis's (bottom), in SVG units."""


@dataclass(frozen=True)
class Bar:
    """One bucket: its hover area, the succeeded part (bottom) and the failed part (top)."""

    x: float
    width: float
    ok_y: float
    ok_height: float
    bad_y: float
    bad_height: float
    title: str
    succeeded: int
    failed: int


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
    bars: tuple[Bar, ...]
    value_ticks: tuple[Tick, ...]
    time_ticks: tuple[Tick, ...]
    label: str
    """What the chart shows, in words (its accessible name)."""


def nice_step(peak: float, most: int = 4) -> int:
    """A round step (1, 2, 5 times a power of ten) giving at most ``most`` ticks up to ``peak``."""
    if peak <= most:
        return 1
    raw = peak / most
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return int(factor * power)
    return int(10 * power)  # pragma: no cover - the loop always returns


def _time_label(moment: datetime, step: int) -> str:
    return moment.strftime("%a %H:%M" if step >= 3600 else "%H:%M")


def _span(start: datetime, step: int) -> str:
    end = start + timedelta(seconds=step)
    fmt = "%Y-%m-%d %H:%M"
    return f"{start.strftime(fmt)}–{end.strftime('%H:%M' if end.date() == start.date() else fmt)} UTC"


def throughput_chart(t: Throughput, width: int = 720, height: int = 180) -> Chart:
    """Bars, ticks and titles for ``t`` in a ``width`` x ``height`` SVG."""
    count = len(t.succeeded)
    left, top, right, bottom = LEFT, TOP, width - RIGHT, height - BOTTOM
    plot_w, plot_h = right - left, bottom - top
    peak = max((ok + bad for ok, bad in zip(t.succeeded, t.failed, strict=True)), default=0)
    step = nice_step(peak)
    top_value = max(step, math.ceil(peak / step) * step)
    scale = plot_h / top_value
    start = datetime.fromisoformat(t.start)
    slot = plot_w / max(count, 1)
    gap = 1.0 if slot >= 4 else 0.0
    bars = []
    for i, (ok, bad) in enumerate(zip(t.succeeded, t.failed, strict=True)):
        x = left + i * slot
        ok_h, bad_h = ok * scale, bad * scale
        moment = start + timedelta(seconds=i * t.bucket_seconds)
        bars.append(Bar(round(x, 2), round(max(slot - gap, 0.5), 2), round(bottom - ok_h, 2), round(ok_h, 2),
                        round(bottom - ok_h - bad_h, 2), round(bad_h, 2),
                        f"{_span(moment, t.bucket_seconds)}: {ok:,} succeeded, {bad:,} failed", ok, bad))
    values = tuple(Tick(round(bottom - v * scale, 2), f"{v:,}") for v in range(0, top_value + 1, step))
    every = max(1, math.ceil(count / 6))
    times = tuple(Tick(round(left + i * slot, 2),
                       _time_label(start + timedelta(seconds=i * t.bucket_seconds), t.bucket_seconds))
                  for i in range(0, count, every))
    minutes = t.bucket_seconds // 60
    label = (f"Runs per {minutes} minute{'s' if minutes != 1 else ''} over the last {t.window}: "
             f"{t.total_succeeded:,} succeeded, {t.total_failed:,} failed, at most {peak:,} in one bucket")
    return Chart(width, height, left, top, right, bottom, tuple(bars), values, times, label)


__all__ = ["Bar", "Chart", "Tick", "nice_step", "throughput_chart"]
