"""Fixtures of the observability tests (helpers live in obs_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from obs_helpers import Spans


@pytest.fixture
def spans() -> Iterator[Spans]:
    collected = Spans()
    yield collected
    collected.provider.shutdown()
