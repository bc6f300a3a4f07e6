"""The import graph has no cycles, counting imports made only for type hints.

import-linter (``make check``) holds the layers; this test holds what a layers contract cannot
see: two modules of one layer importing each other, or a loop hidden behind ``if TYPE_CHECKING``.
A lower module that must name an upper one does so through a Protocol of its own
(``errands.core.host``, ``errands.worker.host``).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import grimp


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("errands", exclude_type_checking_imports=False)


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Each import A -> B for which B also reaches A, as the loop it closes (A, B, ..., A)."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back and frozenset(back) not in seen:
                seen.add(frozenset(back))
                found.append([importer, *back])
    return found


def test_no_import_cycles() -> None:
    loops = cycles(_graph())
    assert loops == [], "modules that import each other (type-hint imports included): " + "; ".join(
        " -> ".join(loop) for loop in loops)


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check itself can fail: a graph with a loop gives that loop."""
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_the_architecture_page_shows_the_graph_the_code_has() -> None:
    script = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "import_graph.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_registered_backend_runs_the_shared_suites() -> None:
    from helpers import BACKENDS as TEST_BACKENDS
    from helpers import DIALECT_OF

    from errands.store.registry import BACKENDS

    assert {DIALECT_OF[name] for name in TEST_BACKENDS} == {backend.name for backend in BACKENDS}
