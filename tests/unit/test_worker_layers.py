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
from errands.worker.settings import (
    CONCURRENCY,
    EMBEDDED_SHUTDOWN_TIMEOUT,
    OPTIONS,
    SHUTDOWN_TIMEOUT,
    SLEEP,
    WorkerSettings,
)

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


def test_worker_services_and_embedded_workers_read_their_defaults_from_the_settings() -> None:
    assert (SHUTDOWN_TIMEOUT, EMBEDDED_SHUTDOWN_TIMEOUT, CONCURRENCY, SLEEP) == (30.0, 10.0, 1, 1.0)
    assert WorkerSettings(queues=("q",)).shutdown_timeout == SHUTDOWN_TIMEOUT
    options = {p.name: p.default for p in cli_worker.params}
    assert (options["shutdown_timeout"], options["concurrency"], options["sleep"]) == (
        SHUTDOWN_TIMEOUT, CONCURRENCY, SLEEP)
    entry_points: list[object] = [Errands.run_worker, Errands.run_until_empty, inprocess.InProcessWorker,
                                  inprocess.start_worker]
    asgi = pytest.importorskip("errands.contrib.asgi", exc_type=ImportError)
    entry_points += [asgi.ErrandsLifespan, asgi.errands_lifespan]
    for func in entry_points:  # no entry point spells an option (or its default) out: all come from the settings
        parameters = inspect.signature(func).parameters  # type: ignore[arg-type]
        assert set(parameters) & set(OPTIONS) <= {"queues"}, func
        assert parameters["options"].kind is inspect.Parameter.VAR_KEYWORD, func
    embedded = inprocess.InProcessWorker(Errands("sqlite:///:memory:")).settings
    assert embedded == WorkerSettings(queues=(), shutdown_timeout=EMBEDDED_SHUTDOWN_TIMEOUT)
    assert (embedded.concurrency, embedded.sleep) == (CONCURRENCY, SLEEP)
