import random

import pytest

from errands.core.errors import ConfigurationError
from errands.core.retry import Backoff, explicit, exponential, fixed, linear, make_backoff


def test_exponential_default_doubles_from_ten_seconds_and_caps_at_an_hour():
    b = make_backoff("exponential")
    assert [b(n) for n in range(1, 6)] == [10, 20, 40, 80, 160]
    assert b(9) == 2560
    assert b(10) == 3600
    assert b(10_000) == 3600


def test_none_means_exponential():
    assert make_backoff(None)(3) == 40


def test_linear_fixed_and_explicit():
    assert [linear(5)(n) for n in (1, 2, 3)] == [5, 10, 15]
    assert linear(5, cap=12)(10) == 12
    assert fixed(7)(1) == fixed(7)(99) == 7
    e = explicit([1, 5, 30])
    assert [e(n) for n in (1, 2, 3, 4, 50)] == [1, 5, 30, 30, 30]


def test_specs_accepted_by_make_backoff():
    assert make_backoff(3)(9) == 3
    assert make_backoff([2, 4])(2) == 4
    assert make_backoff(lambda attempt: attempt * 1.5)(2) == 3.0
    assert make_backoff("linear")(2) == 20
    assert make_backoff("fixed")(5) == 10


def test_jitter_stays_within_its_fraction():
    b = Backoff(fixed(100), jitter=0.1, rng=random.Random(1))
    values = {b(1) for _ in range(200)}
    assert all(90 <= v <= 110 for v in values)
    assert len(values) > 100


def test_negative_delays_from_a_callable_become_zero():
    assert make_backoff(lambda attempt: -5)(1) == 0


@pytest.mark.parametrize("bad", ["sometimes", True, object()])
def test_bad_specs_are_refused_clearly(bad):
    with pytest.raises(ConfigurationError):
        make_backoff(bad)


def test_bad_jitter_and_empty_list_are_refused():
    with pytest.raises(ConfigurationError, match="jitter"):
        make_backoff("fixed", jitter=1.5)
    with pytest.raises(ConfigurationError, match="at least one"):
        make_backoff([])


def test_exponential_custom_base_and_factor():
    assert [exponential(1, 3, 100)(n) for n in (1, 2, 3, 4, 5, 6)] == [1, 3, 9, 27, 81, 100]
