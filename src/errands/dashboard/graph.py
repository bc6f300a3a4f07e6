"""A workflow's graph laid out for the server-rendered SVG of ``/workflows/{id}`` (no JavaScript).

Layered, left to right: a step's column is its ``layer`` (the longest path to it from a step that
waits for nothing, computed by the service), its row follows the average row of its parents, so
fan-outs and fan-ins stay straight.  A column of more than :data:`AGGREGATE_ABOVE` steps is drawn
as one node that counts its steps per state (a bar of the states' colours) and links to the steps
table filtered to that column: a 1,000-step fan-out is three nodes and two edges, not a 48,000-pixel
column.  Pure: the template draws what :func:`layout` returns.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ..services.models import WorkflowStep

AGGREGATE_ABOVE = 40
"""A column with more steps than this is drawn as one node."""
NODE_W, NODE_H, AGG_H = 176, 42, 58
COL_GAP, ROW_GAP, PAD = 56, 12, 8
LABEL_CHARS = 22
CHAR_W = 7
"""About how wide a character of the nodes' 12 px text is (an aggregated node grows to fit its counts)."""
STATE_ORDER = ("succeeded", "finished", "running", "stale", "ready", "delayed", "blocked", "failed", "cancelled",
               "unknown")
"""The order of states in an aggregated node's bar and text."""
SYMBOLS = {"ready": "●", "delayed": "◷", "blocked": "◇", "running": "▶", "stale": "⚠", "failed": "✕",
           "succeeded": "✓", "finished": "✓", "cancelled": "⊘"}
"""The same symbols as the state badges (macros.html): a state is never told by its colour alone."""


@dataclass(frozen=True)
class Segment:
    """One state's share of an aggregated node's bar."""

    state: str
    x: float
    width: float
    count: int


@dataclass(frozen=True)
class Node:
    """A box: one step (``href`` its job page) or a whole column (``href`` the filtered table)."""

    x: float
    y: float
    width: float
    height: float
    href: str
    """Relative to the dashboard's root for steps ("/jobs/12"), to the page for columns ("?layer=2#steps")."""
    title: str
    label: str
    detail: str
    state: str
    symbol: str
    aggregate: bool = False
    segments: tuple[Segment, ...] = ()


@dataclass(frozen=True)
class Edge:
    """A parent-to-child curve, as SVG path data."""

    d: str


@dataclass(frozen=True)
class Graph:
    width: float
    height: float
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    aggregated: tuple[int, ...]
    """The columns drawn as one node."""


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def counts_text(states: Counter[str]) -> str:
    """"990 succeeded, 10 failed": the states present, in STATE_ORDER."""
    ordered = [s for s in STATE_ORDER if states.get(s)] + sorted(s for s in states if s not in STATE_ORDER)
    return ", ".join(f"{states[s]:,} {s}" for s in ordered)


def _aggregate_state(states: Counter[str]) -> str:
    """The colour of a column's box: its most pressing state (failed before blocked before running...)."""
    for state in ("failed", "stale", "blocked", "running", "ready", "delayed", "cancelled"):
        if states.get(state):
            return state
    return "succeeded"


def layout(steps: Sequence[WorkflowStep]) -> Graph:
    """Boxes and curves for ``steps`` (see the module's docstring)."""
    columns: dict[int, list[WorkflowStep]] = defaultdict(list)
    for step in steps:
        columns[step.layer].append(step)
    order = sorted(columns)
    row_of: dict[int, float] = {}
    key_of: dict[int, int] = {}  # job id -> index of its node
    nodes: list[Node] = []
    heights = []
    aggregated = []
    for layer in order:
        members = columns[layer]
        if len(members) > AGGREGATE_ABOVE:
            aggregated.append(layer)
            heights.append(AGG_H)
            continue
        # Rows follow the parents' rows (their average), then the steps' positions.
        members.sort(key=lambda s: (_mean([row_of[p] for p in s.parents if p in row_of], s.position), s.position))
        for row, step in enumerate(members):
            row_of[step.id] = row
        heights.append(len(members) * (NODE_H + ROW_GAP) - ROW_GAP)
    tallest = max(heights, default=0)
    x: float = PAD
    for column, layer in enumerate(order):
        members = columns[layer]
        top = PAD + (tallest - heights[column]) / 2
        if layer in aggregated:
            nodes.append(_aggregate(layer, members, x, top))
            x += nodes[-1].width + COL_GAP
            for step in members:
                key_of[step.id] = len(nodes) - 1
            continue
        for row, step in enumerate(members):
            key_of[step.id] = len(nodes)
            nodes.append(Node(x, top + row * (NODE_H + ROW_GAP), NODE_W, NODE_H, f"/jobs/{step.id}",
                              f"#{step.id} {step.label}: {step.state}" + (f" ({step.error})" if step.error else ""),
                              _short(step.label), f"#{step.id} · {step.state}", step.state,
                              SYMBOLS.get(step.state, "?")))
        x += NODE_W + COL_GAP
    pairs = dict.fromkeys((key_of[p], key_of[s.id]) for s in steps for p in s.parents
                          if p in key_of and key_of[p] != key_of[s.id])
    edges = tuple(_edge(nodes[a], nodes[b]) for a, b in pairs)
    width = x - COL_GAP + PAD if order else 0
    return Graph(width, tallest + PAD * 2, tuple(nodes), edges, tuple(aggregated))


def _mean(values: list[float], fallback: float) -> float:
    return sum(values) / len(values) if values else fallback


def _aggregate(layer: int, members: list[WorkflowStep], x: float, y: float) -> Node:
    states = Counter(s.state for s in members)
    text = counts_text(states)
    width = max(NODE_W, CHAR_W * len(text) + 24)
    inner = width - 16
    segments = []
    at: float = x + 8
    for state in [s for s in STATE_ORDER if states.get(s)] + sorted(s for s in states if s not in STATE_ORDER):
        share = inner * states[state] / len(members)
        segments.append(Segment(state, round(at, 2), round(max(share, 1.0), 2), states[state]))
        at += share
    state = _aggregate_state(states)
    return Node(x, y, width, AGG_H, f"?layer={layer}#steps", f"{len(members):,} steps: {text}",
                f"{len(members):,} steps", text, state, SYMBOLS.get(state, "?"), True, tuple(segments))


def _edge(a: Node, b: Node) -> Edge:
    x1, y1 = a.x + a.width, a.y + a.height / 2
    x2, y2 = b.x, b.y + b.height / 2
    bend = (x2 - x1) / 2
    return Edge(f"M{x1:g},{y1:g} C{x1 + bend:g},{y1:g} {x2 - bend:g},{y2:g} {x2 - 4:g},{y2:g}")


__all__ = ["AGGREGATE_ABOVE", "Edge", "Graph", "Node", "Segment", "counts_text", "layout"]
