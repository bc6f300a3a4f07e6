"""What both commands need: the errands backend named by ``--backend``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from ...compat import task_backends


def errands_backend(alias: str) -> Any:
    from ...backend import ErrandsBackend

    try:
        backend = task_backends[alias]
    except Exception as exc:
        raise CommandError(f"TASKS has no usable backend {alias!r}: {exc}") from exc
    if not isinstance(backend, ErrandsBackend):
        raise CommandError(f"TASKS[{alias!r}] is {type(backend).__name__}, not errands.contrib.django.ErrandsBackend")
    return backend
