"""The workflow page's layout, without a database: columns are longest paths from a root, crowded
columns become one counting node, edges join the drawn nodes once each."""

from __future__ import annotations

from errands.core.rows import JobState, StepRow
from errands.dashboard.graph import AGGREGATE_ABOVE, layout
from errands.services.models import WorkflowStep
from errands.services.workflows import step_layers


def _step(job_id: int, *parents: int, state: str = "ready", layer: int = 0) -> WorkflowStep:
    return WorkflowStep(job_id, job_id, f"job{job_id}", state, list(parents), layer, None)


def test_a_step_s_column_is_the_longest_path_from_a_root():
    rows = [StepRow(1, 0, "a", (), JobState.READY), StepRow(2, 1, "b", (1,), JobState.BLOCKED),
            StepRow(3, 2, "c", (2,), JobState.BLOCKED), StepRow(4, 3, "d", (1, 3), JobState.BLOCKED),
            StepRow(5, 4, "e", (), JobState.READY), StepRow(6, 5, "f", (99,), JobState.READY)]
    assert step_layers(rows) == {1: 0, 2: 1, 3: 2, 4: 3, 5: 0, 6: 0}  # a parent outside the workflow is ignored


def test_a_cycle_cannot_hang_the_layering():
    rows = [StepRow(1, 0, "a", (2,), JobState.BLOCKED), StepRow(2, 1, "b", (1,), JobState.BLOCKED),
            StepRow(3, 2, "c", (), JobState.READY)]
    assert step_layers(rows) == {1: 1, 2: 1, 3: 0}


def test_small_columns_draw_a_node_per_step_and_an_edge_per_dependency():
    steps = [_step(1), _step(2, 1, layer=1), _step(3, 1, layer=1), _step(4, 2, 3, layer=2)]
    graph = layout(steps)
    assert [n.href for n in graph.nodes] == ["/jobs/1", "/jobs/2", "/jobs/3", "/jobs/4"]
    assert len(graph.edges) == 4 and graph.aggregated == ()
    x = {n.href: n.x for n in graph.nodes}
    assert x["/jobs/1"] < x["/jobs/2"] == x["/jobs/3"] < x["/jobs/4"]
    assert graph.width >= max(n.x + n.width for n in graph.nodes)
    assert graph.height >= max(n.y + n.height for n in graph.nodes)


def test_a_crowded_column_becomes_one_node_counting_its_states():
    middle = [_step(i, 1, layer=1, state="failed" if i % 100 == 0 else "succeeded") for i in range(2, 1002)]
    steps = [_step(1, state="succeeded"), *middle, _step(2000, *range(2, 1002), layer=2, state="blocked")]
    graph = layout(steps)
    assert len(graph.nodes) == 3 and graph.aggregated == (1,) and len(graph.edges) == 2
    crowd = graph.nodes[1]
    assert crowd.aggregate and crowd.href == "?layer=1#steps" and crowd.state == "failed"
    assert crowd.title == "1,000 steps: 990 succeeded, 10 failed"
    assert [(s.state, s.count) for s in crowd.segments] == [("succeeded", 990), ("failed", 10)]
    last = crowd.segments[-1]
    assert crowd.x + 8 <= crowd.segments[0].x and last.x + last.width <= crowd.x + crowd.width
    exactly = [_step(i, layer=0) for i in range(AGGREGATE_ABOVE)]
    assert len(layout(exactly).nodes) == AGGREGATE_ABOVE  # up to the limit, every step is drawn


def test_an_empty_workflow_draws_nothing():
    graph = layout([])
    assert graph.nodes == () and graph.edges == () and graph.width == 0
