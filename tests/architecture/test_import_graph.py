"""The import graph has no cycles, counting imports made only for type hints.

import-linter (``make check``) holds the layers; this test holds what a layers contract cannot
see: two modules of one layer importing each other, or a loop hidden behind ``if TYPE_CHECKING``.
A lower module that must name an upper one does so through a Protocol of its own
(``errands.core.host``, ``errands.worker.host``).
"""

from __future__ import annotations

import grimp


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("errands", exclude_type_checking_imports=False)


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm over the modules: every group of two or more that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_no_import_cycles() -> None:
    cycles = strongly_connected(_graph())
    assert cycles == [], "modules that import each other (type-hint imports included): " + "; ".join(
        " <-> ".join(group) for group in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check itself can fail: a graph with a loop gives that loop."""
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert strongly_connected(graph) == [["pkg.a", "pkg.b"]]
