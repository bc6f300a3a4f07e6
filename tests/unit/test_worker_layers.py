"""The worker's place in the layers, and the one home of its defaults."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

import errands.worker
from errands import Errands
from errands.cli.worker import worker as cli_worker
from errands.contrib import inprocess
from errands.worker import liveness
from errands.worker.settings import CONCURRENCY, EMBEDDED_SHUTDOWN_TIMEOUT, SHUTDOWN_TIMEOUT, SLEEP, WorkerSettings

WORKER_DIR = pathlib.Path(errands.worker.__file__).parent


def _imported(path: pathlib.Path) -> set[str]:
    """Every module a file imports, TYPE_CHECKING blocks and function bodies included, made absolute."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = "errands.worker".split(".")[: 2 - (node.level - 1)]
                names.add(".".join([*base, node.module] if node.module else base))
            else:
                names.add(node.module or "")
    return names


@pytest.mark.parametrize("path", sorted(WORKER_DIR.glob("*.py")), ids=lambda p: p.name)
def test_no_worker_module_imports_the_app_or_the_services(path: pathlib.Path) -> None:
    upward = {name for name in _imported(path)
              if name in ("errands.app", "errands.services") or name.startswith(("errands.app.", "errands.services."))}
    assert upward == set(), f"{path.name} imports {upward}"


def test_the_liveness_policy_forgets_a_worker_after_four_leases_and_two_minutes_at_least() -> None:
    assert liveness.forget_worker_after(30) == 120.0 and liveness.forget_worker_after(60) == 240.0


def _default(func: object, name: str) -> object:
    return inspect.signature(func).parameters[name].default  # type: ignore[arg-type]


def test_worker_services_and_embedded_workers_read_their_defaults_from_the_settings() -> None:
    assert (SHUTDOWN_TIMEOUT, EMBEDDED_SHUTDOWN_TIMEOUT, CONCURRENCY, SLEEP) == (30.0, 10.0, 1, 1.0)
    assert WorkerSettings(queues=("q",)).shutdown_timeout == SHUTDOWN_TIMEOUT
    options = {p.name: p.default for p in cli_worker.params}
    assert (options["shutdown_timeout"], options["concurrency"], options["sleep"]) == (
        SHUTDOWN_TIMEOUT, CONCURRENCY, SLEEP)
    assert (_default(Errands.run_worker, "concurrency"), _default(Errands.run_worker, "sleep")) == (CONCURRENCY, SLEEP)
    embedded = [inprocess.InProcessWorker, inprocess.start_worker]
    asgi = pytest.importorskip("errands.contrib.asgi", exc_type=ImportError)
    embedded += [asgi.ErrandsLifespan, asgi.errands_lifespan]
    for func in embedded:
        assert _default(func, "shutdown_timeout") == EMBEDDED_SHUTDOWN_TIMEOUT, func
        assert (_default(func, "concurrency"), _default(func, "sleep")) == (CONCURRENCY, SLEEP), func
