"""Workflows: graphs of jobs with dependencies and result passing, built in memory.

``chain(a, b, c)`` runs one after another; ``group(a, b)`` side by side; both nest, and a
:class:`Workflow` wires any graph (``wf.add(node, after=[x, y])``).  Nothing here touches the
database: :meth:`Workflow.members` flattens the graph into the rows that one transaction
stores (each with the earlier rows it waits for, as negative offsets), and the store and the
worker keep the promises (see ``store/steps.py``).

Result passing is opt-in and explicit.  A node's *value* is what a step that receives it gets:
a job's return value; a chain's, its last node's value; a group's, the list of its members'
values in member order.  ``chain(..., pass_results=True)`` gives each node the value of the node
before as its first positional argument (Celery's ``a.s() | b.s()``); ``wf.add(node,
after=[x], results=True)`` gives ``node`` the value of ``x`` (with several ``after`` nodes, the
list of their values), so ``chain(group(a, b), total, pass_results=True)`` is a chord.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from .errors import InvalidOption
from .rows import NewJob

POLICIES = ("block", "cancel")
"""What happens to the steps after a step that ends in the dead letter: they stay blocked
(visible; retrying the dead step resumes the workflow) or are cancelled."""
MAX_STEPS = 100_000


class _Description:
    """A chain or a group only describes jobs; Celery's habits of calling it (``chain(...)()``,
    ``.delay()``, ``.apply_async()``) get an error that names errands' way to enqueue it."""

    __slots__ = ()

    if not TYPE_CHECKING:  # hidden from type checkers, which keep refusing chain(...)() and .delay()

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            raise TypeError(_how_to_enqueue(self, "calling it"))

        def __getattr__(self, name: str) -> Any:
            if name in CELERY_CALLS:
                raise AttributeError(_how_to_enqueue(self, f".{name}()"))
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


CELERY_CALLS = frozenset({"delay", "apply_async", "apply", "enqueue", "run"})
"""What Celery users try on a canvas to run it."""


def _how_to_enqueue(node: object, tried: str) -> str:
    what = type(node).__name__.lower()
    direct = ("app.chain(...) with the same arguments, or app.chain(chain(...))" if what == "chain" else
              "app.batch([a.prepare(...), b.prepare(...)]), or app.chain(group(...))")
    return (f"errands.{what}(...) only describes jobs; {tried} does not enqueue them.  Enqueue with {direct} "
            f"(it stores the jobs at once and returns a handle), or add the {what} to a workflow: "
            f"wf = app.workflow(); wf.add({what}(...)); wf.enqueue()")


@dataclass(frozen=True)
class Chain(_Description):
    """Nodes that run one after the other (see :func:`chain`)."""

    nodes: tuple[Node, ...]
    pass_results: bool = False


@dataclass(frozen=True)
class Group(_Description):
    """Nodes that run side by side (see :func:`group`)."""

    nodes: tuple[Node, ...]


Node = Union[NewJob, Chain, Group, "Workflow"]


def chain(*nodes: Node, pass_results: bool = False) -> Chain:
    """Run ``nodes`` one after the other, each once the one before succeeded.

    ``pass_results``: each node receives the value of the node before as its first argument.
    """
    return Chain(_nodes(nodes, "chain"), bool(pass_results))


def group(*nodes: Node) -> Group:
    """Run ``nodes`` side by side; what comes after a group waits for all of them."""
    return Group(_nodes(nodes, "group"))


def _nodes(nodes: Iterable[Any], what: str) -> tuple[Node, ...]:
    out = tuple(nodes)
    if not out:
        raise InvalidOption(f"a {what} needs at least one job")
    for node in out:
        if not isinstance(node, (NewJob, Chain, Group, Workflow)):
            raise InvalidOption(f"a {what} takes job.prepare(...) values, chains, groups and workflows, "
                                f"got {type(node).__name__}")
    return out


class StepRef:
    """What :meth:`Workflow.add` returns: a node of the graph, to wait for (``after=[ref]``) and,
    once the workflow is enqueued, to ask about (``ref.jobs``: its jobs' handles)."""

    __slots__ = ("workflow", "item", "positions")

    def __init__(self, workflow: Workflow, item: _Added, positions: tuple[int, ...]) -> None:
        self.workflow = workflow
        self.item = item
        self.positions = positions
        """Every job of the node, as positions in its workflow."""

    @property
    def jobs(self) -> list[Any]:
        """Handles of the node's jobs, in order (after :meth:`Workflow.enqueue`)."""
        handles = self.workflow.handles
        if handles is None:
            raise InvalidOption("enqueue the workflow first")
        return [handles[p] for p in self.positions]

    @property
    def job(self) -> Any:
        """The handle of the node's last job (a chain's last link, a job itself)."""
        return self.jobs[-1]

    def __repr__(self) -> str:
        return f"<StepRef jobs at {list(self.positions)}>"


@dataclass(eq=False)
class _Added:
    node: Node
    after: tuple[StepRef, ...]
    results: bool


_Placed = tuple[tuple[int, ...], Any, tuple[int, ...]]
"""(exits, value, positions) of a placed node: the positions its followers wait for, its value
as positions (an int or nested lists of them), every position it holds."""


@dataclass(eq=False)
class Workflow:
    """A graph of jobs stored in one transaction (``app.workflow()`` makes one bound to the app)."""

    name: str | None = None
    policy: str = "block"
    on_complete: NewJob | None = None
    """Enqueued once when every step has ended (succeeded, or failed or cancelled)."""
    on_failure: NewJob | None = None
    """Enqueued once when the first step ends in the dead letter (or is cancelled)."""
    queue: str | None = None
    """The queue of every step and callback (None: each job's own)."""
    priority: int | None = None
    store: Any = field(default=None, repr=False)
    """What stores it (``app.workflow()`` sets the app's); :meth:`enqueue` calls ``store(self)``."""
    added: list[_Added] = field(default_factory=list)
    handles: list[Any] | None = None
    """The jobs' handles in position order, once enqueued."""
    id: int | None = None
    """The workflow's id, once enqueued."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise InvalidOption(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.name is not None and (not isinstance(self.name, str) or not 0 < len(self.name) <= 255):
            raise InvalidOption("a workflow's name must be a string of 1 to 255 characters")

    def enqueue(self) -> Any:
        """Store every job of the graph in one transaction; returns a handle with the workflow's
        id, its status and a way to cancel it (``app.workflow()`` made this workflow)."""
        if self.store is None:
            raise InvalidOption("this workflow belongs to no app: make it with app.workflow()")
        return self.store(self)

    def add(self, node: Node, *, after: Sequence[StepRef] | StepRef = (), results: bool = False) -> StepRef:
        """Add ``node`` (a prepared job, a chain, a group or another workflow), to run once every
        node in ``after`` succeeded.  ``results``: it receives their values as its first
        argument (one value for one node in ``after``, else the list of their values)."""
        if self.handles is not None:
            raise InvalidOption("this workflow was enqueued already; build a new one")
        [node] = _nodes([node], "workflow")
        if node is self or (isinstance(node, Workflow) and _contains(node, self)):
            raise InvalidOption("a workflow cannot contain itself")
        refs = (after,) if isinstance(after, StepRef) else tuple(after)
        for ref in refs:
            if not isinstance(ref, StepRef) or ref.workflow is not self:
                raise InvalidOption("after= takes what add() of this same workflow returned")
        if results and not refs:
            raise InvalidOption("results=True needs after=[...]: the nodes whose results it receives")
        item = _Added(node, refs, bool(results))
        self.added.append(item)
        plan = _Plan()
        placed = plan.place_workflow(self, ())
        return StepRef(self, item, placed[id(item)][2])

    def members(self) -> list[NewJob]:
        """The graph as rows in a valid order: each with the earlier rows it waits for (negative
        offsets in ``after``), its result inputs in the same numbering, and its position."""
        plan = _Plan()
        plan.place_workflow(self, ())
        if not plan.jobs:
            raise InvalidOption("a workflow needs at least one job")
        if len(plan.jobs) > MAX_STEPS:
            raise InvalidOption(f"a workflow may hold at most {MAX_STEPS} jobs, this one has {len(plan.jobs)}")
        return [job._replace(after=tuple(d - position for d in deps),
                             inputs=None if inputs is None else _relative(inputs, position),
                             step=(position, job.name))
                for position, (job, deps, inputs) in enumerate(plan.jobs)]


def _contains(outer: Workflow, inner: Workflow) -> bool:
    for item in outer.added:
        if item.node is inner or (isinstance(item.node, Workflow) and _contains(item.node, inner)):
            return True
    return False


class _Plan:
    """Flattens nodes into (job, positions it waits for, inputs as positions)."""

    def __init__(self) -> None:
        self.jobs: list[tuple[NewJob, tuple[int, ...], Any]] = []

    def place(self, node: Node, deps: tuple[int, ...], inputs: Any) -> _Placed:
        """Place ``node`` after ``deps``, receiving ``inputs``."""
        start = len(self.jobs)
        if isinstance(node, NewJob):
            if node.after:
                raise InvalidOption("a workflow's jobs wait through the workflow (add(after=...), chain, group), "
                                    "not through using(after=...)")
            self.jobs.append((node, deps, inputs))
            return (start,), start, (start,)
        if isinstance(node, Chain):
            exits, value = deps, inputs
            for i, part in enumerate(node.nodes):
                received = inputs if i == 0 else (value if node.pass_results else None)
                exits, value, _ = self.place(part, exits, received)
            return exits, value, tuple(range(start, len(self.jobs)))
        if isinstance(node, Group):
            all_exits: list[int] = []
            values = []
            for part in node.nodes:
                exits, value, _ = self.place(part, deps, inputs)
                all_exits.extend(exits)
                values.append(value)
            return tuple(dict.fromkeys(all_exits)), values, tuple(range(start, len(self.jobs)))
        start_placed = self.place_workflow(node, deps, inputs)
        sinks = [start_placed[id(item)] for item in node.added
                 if not any(item is ref.item for other in node.added for ref in other.after)]
        exits = tuple(dict.fromkeys(e for p in sinks for e in p[0]))
        value = sinks[0][1] if len(sinks) == 1 else [p[1] for p in sinks]
        return exits, value, tuple(range(start, len(self.jobs)))

    def place_workflow(self, wf: Workflow, deps: tuple[int, ...], inputs: Any = None) -> dict[int, _Placed]:
        """Place a workflow's nodes; those that wait for nothing inside it wait for ``deps`` (and
        receive ``inputs``).  Returns each added node's placement by ``id(item)``."""
        placed: dict[int, _Placed] = {}
        for item in wf.added:
            if item.after:
                waits = [placed[id(ref.item)] for ref in item.after]
                item_deps = tuple(dict.fromkeys(e for p in waits for e in p[0]))
                received = None
                if item.results:
                    received = waits[0][1] if len(waits) == 1 else [p[1] for p in waits]
            else:
                item_deps, received = deps, inputs
            placed[id(item)] = self.place(item.node, item_deps, received)
        return placed


def _relative(spec: Any, position: int) -> Any:
    if isinstance(spec, list):
        return [_relative(item, position) for item in spec]
    return spec - position
