"""Fairness keys decided before the database (issue 25, point 4): each call's key, computed once at
enqueue from the job's arguments, and the clear errors for keys no backend could store."""

from __future__ import annotations

import pytest

from errands import ConfigurationError, Errands, InvalidOption

app = Errands("sqlite:///:memory:")


@app.job(name="unit.tenant", fairness_key=lambda tenant, n: tenant)
def per_tenant(tenant: str, n: int) -> None: ...


@app.job(name="unit.shared", fairness_key="exports")
def shared(n: int) -> None: ...


def test_a_call_carries_its_key_and_no_turn_yet() -> None:
    job = per_tenant.prepare("acme", 1)
    assert job.fairness_key == "acme" and job.fair_turn == 0 and not job.is_plain  # the store gives the turn
    assert shared.prepare(1).fairness_key == "exports"


def test_keys_no_backend_could_store_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="fairness_key"):
        app.job(name="unit.bad", fairness_key="")(lambda n: None)
    with pytest.raises(ConfigurationError, match="fairness_key"):
        app.job(name="unit.long", fairness_key="x" * 256)(lambda n: None)
    with pytest.raises(InvalidOption, match="fairness key"):
        per_tenant.prepare("", 1)
