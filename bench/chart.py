"""The benchmark's table as a picture: a grouped bar chart written as SVG by hand (standard library only).

    .venv/bin/python bench/chart.py bench/results/latest.json bench/results/latest.svg

``bench/run.py`` calls :func:`render` after every run (``bench/results/<timestamp>.svg`` and
``latest.svg``).  This module knows nothing about systems or figures: run.py turns its results into
:class:`Panel` objects (one per figure, bars grouped by backend).  No plotting library: the bench runs
in the project's venv, which has none, and a hand-written SVG is small, diffable and renders in any
browser and in the docs site.

The axis is logarithmic: the values of one figure span three orders of magnitude (a bare SQLite
loop drains 300,000 jobs/s, procrastinate a few hundred), and a linear axis would leave most bars
as slivers.  Every bar carries its value as text, so nothing is read off the axis alone.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from html import escape

ROLE_COLOURS = {"errands": "#1f6fb4", "errands-variant": "#8db8de", "peer": "#e08a2c", "bare": "#8c8c8c"}
ROLE_NAMES = {"errands": "errands", "errands-variant": "errands, other settings", "peer": "peer",
              "bare": "bare SQL loop (same database, same run)"}

WIDTH = 1000
COLUMNS = 2
PANEL_W = (WIDTH - 30) // COLUMNS
LABEL_W = 150  # bar labels, left of the bars
VALUE_W = 125  # value text, right of the longest bar
BAR_H = 12
BAR_GAP = 3
GROUP_GAP = 8
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""


@dataclass(frozen=True)
class Bar:
    label: str
    value: float | None  # None: no figure (the note says why)
    role: str = "peer"  # a key of ROLE_COLOURS
    text: str = ""  # the value as the table prints it
    note: str = ""  # after the value ("0.14x bare"), or instead of it when value is None ("failed: ...")


@dataclass(frozen=True)
class Group:
    title: str
    bars: list[Bar] = field(default_factory=list)


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    higher_is_better: bool
    groups: list[Group] = field(default_factory=list)


def log_range(values: list[float]) -> tuple[float, float]:
    """Whole decades around the positive ``values``, at least one apart.

    The lower end is the decade below the smallest value, one further down when that value sits just
    above it (10,253 on an axis from 10,000 would be a bar of no length).
    """
    positive = [v for v in values if v > 0]
    if not positive:
        return 1.0, 10.0
    lo = math.floor(math.log10(min(positive)))
    if min(positive) < 2 * 10.0 ** lo:
        lo -= 1
    hi = math.ceil(math.log10(max(positive)))
    if hi <= lo:
        hi = lo + 1
    return 10.0 ** lo, 10.0 ** hi


def tick_label(v: float) -> str:
    """1, 10, 100, 1k, 10k, 100k, 1M; 0.1, 0.01 below one."""
    if v >= 1_000_000:
        return f"{v / 1_000_000:g}M"
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def bar_length(value: float, lo: float, hi: float, span: float) -> float:
    """Pixels for ``value`` on a log axis from ``lo`` to ``hi`` drawn ``span`` pixels long (at least 1)."""
    if value <= 0:
        return 1.0
    frac = (math.log10(value) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    return max(1.0, min(1.0, frac) * span)


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "start", extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>'
            f"{escape(s)}</text>")


def _panel(p: Panel, x0: float, y0: float) -> tuple[list[str], float]:
    """One panel's elements, and its height."""
    out = [_text(x0, y0 + 14, p.title, 13, extra=' font-weight="bold"'),
           _text(x0, y0 + 28, f"{p.unit}, {'higher' if p.higher_is_better else 'lower'} is better; log scale", 10,
                 extra=' fill="#555"')]
    lo, hi = log_range([b.value for g in p.groups for b in g.bars if b.value is not None])
    bx, span = x0 + LABEL_W, PANEL_W - LABEL_W - VALUE_W
    y = y0 + 40
    body_top = y
    if not any(g.bars for g in p.groups):
        out.append(_text(x0, y + 12, "no figures in this run", extra=' fill="#777" font-style="italic"'))
        return out, 40 + 20
    for g in p.groups:
        if not g.bars:
            continue
        out.append(_text(x0, y + 10, g.title, 11, extra=' font-weight="bold" fill="#333"'))
        y += 14
        for b in g.bars:
            label = b.label if len(b.label) <= 26 else b.label[:25] + "…"
            out.append(_text(bx - 6, y + BAR_H - 2, label, 10, "end"))
            if b.value is None:
                out.append(_text(bx + 2, y + BAR_H - 2, b.note or "no figure", 10,
                                 extra=' fill="#777" font-style="italic"'))
            else:
                w = bar_length(b.value, lo, hi, span)
                colour = ROLE_COLOURS.get(b.role, ROLE_COLOURS["peer"])
                tip = f"{b.label}: {b.text or b.value} {p.unit}" + (f" ({b.note})" if b.note else "")
                out.append(f'<rect class="bar" data-role="{escape(b.role)}" x="{bx:.1f}" y="{y:.1f}" '
                           f'width="{w:.1f}" height="{BAR_H}" fill="{colour}"><title>{escape(tip)}</title></rect>')
                shown = (b.text or f"{b.value:,.4g}") + (f" ({b.note})" if b.note else "")
                out.append(_text(bx + w + 4, y + BAR_H - 2, shown, 10))
            y += BAR_H + BAR_GAP
        y += GROUP_GAP
    # Decade grid lines and their labels, under the bars' area.
    decades = round(math.log10(hi) - math.log10(lo))
    grid = []
    for i in range(decades + 1):
        v = lo * 10 ** i
        gx = bx + bar_length(v, lo, hi, span) if i else bx
        grid.append(f'<line x1="{gx:.1f}" y1="{body_top:.1f}" x2="{gx:.1f}" y2="{y:.1f}" stroke="#ddd" '
                    'stroke-width="1"/>')
        grid.append(_text(gx, y + 10, tick_label(v), 9, "middle", ' fill="#555"'))
    return grid + out, y + 16 - y0


def render(panels: list[Panel], title: str, subtitle: str = "") -> str:
    """The whole chart as an SVG document: title, subtitle lines, a legend, then the panels in ``COLUMNS`` columns."""
    body: list[str] = [_text(15, 22, title, 15, extra=' font-weight="bold"')]
    y = 30.0
    for line in subtitle.splitlines():
        body.append(_text(15, y + 10, line, 10, extra=' fill="#555"'))
        y += 14
    y += 4
    lx = 15.0
    for role, name in ROLE_NAMES.items():
        body.append(f'<rect x="{lx:.1f}" y="{y:.1f}" width="10" height="10" fill="{ROLE_COLOURS[role]}"/>')
        body.append(_text(lx + 14, y + 9, name, 10))
        lx += 24 + 6.2 * len(name)
    y += 22
    for row in range(0, len(panels), COLUMNS):
        heights = []
        for col, p in enumerate(panels[row:row + COLUMNS]):
            elements, h = _panel(p, 15 + col * (PANEL_W + 15), y)
            body += elements
            heights.append(h)
        y += max(heights) + 12
    height = math.ceil(y)
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" {FONT} role="img">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>',
        *body, "</svg>", ""])


def main(argv: list[str]) -> int:
    """Redraw the chart of a stored run: ``chart.py RESULTS.json OUT.svg``."""
    import json
    import os

    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run

    with open(argv[0]) as f:
        report = json.load(f)
    run.write_chart(report, argv[1])
    print(f"written: {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
