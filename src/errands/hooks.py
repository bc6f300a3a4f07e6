"""Hooks around job runs, per app and per job: for logging, metrics, tracing and error reporting.

* ``before(ctx)`` runs just before the handler; an exception there fails the run.
* ``after(ctx, error)`` runs after it (``error`` is None on success); its own
  exceptions are logged and never change the run's outcome.
* ``around(ctx)`` returns a context manager entered around the handler (a generator
  function is accepted and wrapped with ``contextlib.contextmanager``), e.g. a span.
* ``on_dead(ctx, error_type, error_message)`` runs in the worker after a run was moved
  to the dead letter (seed 004's ``failed()``).

App hooks wrap job hooks: app ``around`` is outermost, then the job's, then app
``before``, job ``before``, the handler, job ``after``, app ``after``.  For ``async
def`` jobs the hooks run on the worker's event loop, inside the job's own context.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any, ContextManager

log = logging.getLogger("errands.hooks")


class Hooks:
    __slots__ = ("before_run", "after_run", "around_run", "dead", "any")

    def __init__(self) -> None:
        self.before_run: list[Callable[..., Any]] = []
        self.after_run: list[Callable[..., Any]] = []
        self.around_run: list[Callable[..., ContextManager[Any]]] = []
        self.dead: list[Callable[..., Any]] = []
        self.any = False
        """Whether any hook is registered: read for every run, so a plain attribute."""

    def __bool__(self) -> bool:
        return self.any

    def before(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self.before_run.append(fn)
        self.any = True
        return fn

    def after(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self.after_run.append(fn)
        self.any = True
        return fn

    def around(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self.around_run.append(contextlib.contextmanager(fn) if inspect.isgeneratorfunction(fn) else fn)
        self.any = True
        return fn

    def on_dead(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self.dead.append(fn)
        self.any = True
        return fn


def chain_of(app_hooks: Hooks, job_hooks: Hooks | None) -> list[Hooks]:
    """The hook sets that apply to one run, outermost first (empty ones left out)."""
    return [h for h in (app_hooks, job_hooks) if h]


@contextlib.contextmanager
def around(chain: list[Hooks], ctx: Any) -> Iterator[None]:
    """Enter every ``around`` hook, then call the ``before`` hooks."""
    with contextlib.ExitStack() as stack:
        for hooks in chain:
            for make in hooks.around_run:
                stack.enter_context(make(ctx))
        for hooks in chain:
            for fn in hooks.before_run:
                fn(ctx)
        yield


def call_after(chain: list[Hooks], ctx: Any, error: BaseException | None) -> None:
    for hooks in reversed(chain):
        for fn in hooks.after_run:
            try:
                fn(ctx, error)
            except Exception:  # an after-hook must never change the outcome it reports
                log.exception("after-hook %r failed", fn)


def call_on_dead(chain: list[Hooks], ctx: Any, error_type: str, error_message: str) -> None:
    for hooks in reversed(chain):
        for fn in hooks.dead:
            try:
                fn(ctx, error_type, error_message)
            except Exception:  # reported, never fatal to the worker
                log.exception("on_dead hook %r failed", fn)
