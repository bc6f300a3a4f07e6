"""Arguments of parameters annotated int, float, str or bool are checked at enqueue (issue 26):
``send_receipt.enqueue("one")`` for ``order_id: int`` is refused, nothing is stored; other
annotations are not checked."""

from __future__ import annotations

from typing import Any, Optional, Union

import pytest

from errands import ConfigurationError, EnqueueError, Errands, InvalidOption
from errands.core.errors import ArgumentTypeError


@pytest.fixture
def app(tmp_path):
    return Errands(f"sqlite:///{tmp_path / 'x.db'}")


def send_receipt(order_id: int, note: str | None = None, ratio: float = 1.0, urgent: bool = False) -> None: ...


def tagged(first: Optional[int], *counts: int, label: Union[str, int] = "x", **names: str) -> None: ...  # noqa: UP007, UP045


def unchecked(items: list[int], anything: Any, thing: Undefined, pair: tuple[int, int], /,  # noqa: F821
              maybe: int | list[int] = 0) -> None: ...


def test_a_str_for_an_int_is_refused_naming_the_job_parameter_and_types(app):
    job = app.job(send_receipt)
    with pytest.raises(ArgumentTypeError) as caught:
        job.enqueue("one")
    message = str(caught.value)
    assert f"job {job.name!r}: argument 'order_id' is annotated int, got str 'one'" in message
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, InvalidOption)
    assert isinstance(caught.value, EnqueueError)
    assert app.counts() == {}  # nothing stored


@pytest.mark.parametrize(("args", "kwargs", "refused"), [
    ((1,), {"note": 2}, "argument 'note' is annotated str | None, got int 2"),
    ((1, None, "fast"), {}, "argument 'ratio' is annotated float, got str 'fast'"),
    ((1,), {"urgent": 1}, "argument 'urgent' is annotated bool, got int 1"),
    ((1.5,), {}, "argument 'order_id' is annotated int, got float 1.5"),
])
def test_each_scalar_annotation_refuses_other_types(app, args, kwargs, refused):
    job = app.job(send_receipt)
    with pytest.raises(ArgumentTypeError, match=refused):
        job.prepare(*args, **kwargs)


def test_what_a_type_checker_accepts_is_accepted(app):
    job = app.job(send_receipt)
    job.prepare(1, None, 2, True)       # float takes an int; X | None takes None
    job.prepare(True, "n", 0.5)         # bool is an int
    job.prepare(order_id=7, note="n", ratio=1.0, urgent=False)


def test_optional_unions_and_star_parameters_are_checked_per_argument(app):
    job = app.job(tagged)
    job.prepare(None, 1, 2, label=3, who="ada")
    with pytest.raises(ArgumentTypeError, match=r"argument '\*counts' is annotated int, got str 'two'"):
        job.prepare(1, 1, "two")
    with pytest.raises(ArgumentTypeError, match=r"argument 'who' \(in \*\*names\) is annotated str, got int 5"):
        job.prepare(1, who=5)
    with pytest.raises(ArgumentTypeError, match=r"argument 'label' is annotated str \| int, got float"):
        job.prepare(1, label=1.5)


def test_other_annotations_are_not_checked(app):
    job = app.job(unchecked)
    job.prepare("not a list", object.__name__, 3, [1, "x"], maybe="anything")
    assert job.scalars is None


def test_an_unresolvable_annotation_leaves_the_others_checked(app):
    def later(order_id: int, thing: NotDefinedYet = None) -> None: ...  # noqa: F821

    job = app.job(name="later")(later)
    with pytest.raises(ArgumentTypeError, match="argument 'order_id' is annotated int"):
        job.prepare("one")
    job.prepare(1, thing=object.__name__)


def test_a_wrong_type_in_a_periodic_schedule_is_refused_when_it_is_declared(app):
    with pytest.raises(ConfigurationError, match="periodic job .*argument 'order_id' is annotated int, got str"):
        app.periodic("* * * * *", args=["one"])(send_receipt)
