"""Unique modes decided before the database (issue 25, point 2): which rule an enqueue's key follows,
which key and run time a debounced call gets, and the clear errors for options no enqueue could use."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from errands import ConfigurationError, Errands, InvalidOption
from errands.core.rows import UniqueRule

app = Errands("sqlite:///:memory:")


@app.job(name="unit.plain")
def plain(n: int) -> None: ...


@app.job(name="unit.replaced", unique_key=lambda n: f"k:{n % 2}", on_conflict="replace")
def replaced(n: int) -> None: ...


@app.job(name="unit.debounced", debounce=5, max_wait=30)
def debounced(n: int) -> None: ...


def test_each_mode_makes_its_rule() -> None:
    def rule(job, **options):  # type: ignore[no-untyped-def]
        return job.using(unique_key="k", **options).prepare(1).unique_rule

    assert rule(plain) is None  # keep, waiting or running: today's rule
    assert rule(plain, on_conflict="replace") == UniqueRule(replace=True, running=False)
    assert rule(plain, on_conflict="replace", unique_states=("waiting", "running")) == UniqueRule(True, True)
    assert rule(plain, unique_states=["waiting"]) == UniqueRule(replace=False, running=False)
    assert rule(plain, debounce=2) == UniqueRule(replace=True, running=False)
    assert rule(debounced) == UniqueRule(replace=True, running=False, max_wait=30.0)
    assert rule(debounced, max_wait=60) == UniqueRule(replace=True, running=False, max_wait=60.0)


def test_keys_and_run_times_of_the_modes() -> None:
    assert [replaced.prepare(n).unique_key for n in (1, 2, 3)] == ["k:1", "k:0", "k:1"]
    assert replaced.using(unique_key="mine").prepare(1).unique_key == "mine"
    burst = debounced.prepare(1)
    assert (burst.unique_key, burst.delay) == ("unit.debounced", 5.0)  # no key given: one burst per job
    assert plain.using(on_conflict="replace").prepare(1).is_plain  # no key, nothing to replace
    assert plain.prepare(1).unique_rule is None and replaced.prepare(1).unique_rule == UniqueRule(True, False)


@pytest.mark.parametrize(("options", "message"), [
    ({"on_conflict": "update"}, "on_conflict must be 'keep' or 'replace'"),
    ({"unique_states": ("running",)}, "unique_states must be"),
    ({"unique_states": ("waiting", "done")}, "unique_states must be"),
    ({"debounce": -1}, "debounce must be a positive number"),
    ({"debounce": 0}, "debounce must be a positive number"),
    ({"debounce": 10, "max_wait": 5}, r"max_wait \(5 s\) must be at least debounce \(10 s\)"),
    ({"max_wait": 5}, "max_wait bounds a debounce"),
    ({"debounce": 5, "on_conflict": "keep"}, "cannot be combined with on_conflict='keep'"),
    ({"unique_key": ""}, "unique_key must be a function of the job's arguments or a non-empty string"),
])
def test_bad_options_are_refused_at_definition(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        app.job(name="unit.bad", **options)  # type: ignore[arg-type]


def test_bad_calls_are_refused_at_enqueue() -> None:
    with pytest.raises(InvalidOption, match="on_conflict must be"):
        plain.using(on_conflict="upsert")  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="debounce sets the run time"):
        debounced.using(delay=10)
    with pytest.raises(InvalidOption, match="debounce sets the run time"):
        plain.using(debounce=5, run_at=datetime.now(timezone.utc))
    with pytest.raises(InvalidOption, match="must be at least debounce"):
        debounced.using(max_wait=1)
    with pytest.raises(InvalidOption, match="cannot be combined"):
        debounced.using(on_conflict="keep")
    with pytest.raises(InvalidOption, match="unique key of job 'unit.keyed' must be"):
        app.job(name="unit.keyed", unique_key=lambda n: "")(lambda n: None).enqueue(1)
