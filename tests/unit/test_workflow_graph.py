"""How a workflow's graph flattens into rows (no database): dependencies as offsets to earlier
rows, result inputs in the same numbering, and the mistakes refused while building."""

from __future__ import annotations

import pytest

from errands import InvalidOption, Workflow, chain, group
from errands.core.rows import NewJob


def job(name: str) -> NewJob:
    return NewJob(name, "default", '{"args":[],"kwargs":{}}')


def flat(wf: Workflow) -> list[tuple[str, list[int], object]]:
    """(name, absolute positions waited for, inputs as absolute positions) per row."""
    out = []
    for position, row in enumerate(wf.members()):
        def absolute(spec: object, position: int = position) -> object:
            return [absolute(s) for s in spec] if isinstance(spec, list) else position + spec  # type: ignore[operator]
        out.append((row.name, [position + a for a in row.after],
                    None if row.inputs is None else absolute(row.inputs)))
    return out


def test_a_chain_waits_link_by_link_and_passes_each_result_on():
    wf = Workflow()
    wf.add(chain(job("a"), job("b"), job("c"), pass_results=True))
    assert flat(wf) == [("a", [], None), ("b", [0], 0), ("c", [1], 1)]


def test_a_chain_without_pass_results_passes_nothing():
    wf = Workflow()
    wf.add(chain(job("a"), job("b")))
    assert flat(wf) == [("a", [], None), ("b", [0], None)]


def test_a_chord_is_a_chain_of_a_group_and_a_callback_receiving_the_list():
    wf = Workflow()
    wf.add(chain(group(job("a"), job("b"), job("c")), job("sum"), pass_results=True))
    assert flat(wf)[-1] == ("sum", [0, 1, 2], [0, 1, 2])


def test_a_group_of_chains_waits_for_each_chain_s_last_link():
    wf = Workflow()
    g = wf.add(group(chain(job("a1"), job("a2")), chain(job("b1"), job("b2"))))
    wf.add(job("end"), after=[g], results=True)
    assert flat(wf)[-1] == ("end", [1, 3], [1, 3])


def test_after_several_nodes_receives_the_list_of_their_values():
    wf = Workflow()
    x = wf.add(job("x"))
    y = wf.add(group(job("y1"), job("y2")))
    wf.add(job("z"), after=[x, y], results=True)
    assert flat(wf)[-1] == ("z", [0, 1, 2], [0, [1, 2]])


def test_a_workflow_inside_a_workflow_waits_as_a_node():
    inner = Workflow()
    i1 = inner.add(job("i1"))
    inner.add(job("i2"), after=[i1], results=True)
    outer = Workflow()
    start = outer.add(job("start"))
    middle = outer.add(inner, after=[start])
    outer.add(job("end"), after=[middle], results=True)
    assert flat(outer) == [("start", [], None), ("i1", [0], None), ("i2", [1], 1), ("end", [2], 2)]


def test_positions_name_the_jobs_of_each_node():
    wf = Workflow()
    a = wf.add(job("a"))
    g = wf.add(group(job("b"), job("c")), after=[a])
    assert a.positions == (0,) and g.positions == (1, 2)
    assert [m.step for m in wf.members()] == [(0, "a"), (1, "b"), (2, "c")]


@pytest.mark.parametrize("build, message", [
    (lambda wf: wf.add(job("x"), results=True), "results=True needs after"),
    (lambda wf: wf.add(job("x"), after=[Workflow().add(job("y"))]), "same workflow"),
    (lambda wf: wf.add("not a job"), "takes job.prepare"),  # type: ignore[arg-type]
    (lambda wf: wf.add(chain()), "at least one job"),
    (lambda wf: wf.add(wf), "cannot contain itself"),
    (lambda wf: wf.add(job("x")._replace(after=(7,))), "wait through the workflow"),
    (lambda wf: Workflow(policy="ignore"), "policy must be one of"),
])
def test_mistakes_are_refused_while_building(build, message):
    wf = Workflow()
    with pytest.raises(InvalidOption, match=message):
        build(wf)
        wf.members()


def test_an_empty_workflow_is_refused():
    with pytest.raises(InvalidOption, match="at least one job"):
        Workflow().members()
