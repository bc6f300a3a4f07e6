"""What both commands need: the errands backend named by ``--backend``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

if TYPE_CHECKING:
    from ...backend import ErrandsBackend


def errands_backend(alias: str) -> ErrandsBackend:
    """:func:`errands.contrib.django.backend.errands_backend`, its refusal as a command error."""
    from ...backend import errands_backend as lookup

    try:
        return lookup(alias)
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from exc
