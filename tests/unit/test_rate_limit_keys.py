"""Per-key rate limits decided before the database (issue 25, point 3): the key an enqueue stores,
the clear errors for a key no window could use, and the window and lock row each key counts under."""

from __future__ import annotations

import pytest

from errands import ConfigurationError, Errands, InvalidOption
from errands.core.limits import RATE_KEY_LOCKS, RateLimit, rate_window, rate_window_lock
from errands.core.rows import Limit

app = Errands("sqlite:///:memory:")


@app.job(name="unit.per_customer", rate_limit="20/minute", rate_limit_key=lambda customer_id, **_: customer_id)
def per_customer(customer_id: object, order: int = 0) -> None: ...


@app.job(name="unit.per_token", rate_limit="5/s", rate_limit_key="partner-api", cost=2)
def per_token(n: int) -> None: ...


@app.job(name="unit.unkeyed", rate_limit="5/s")
def unkeyed(n: int) -> None: ...


def test_the_key_is_computed_once_at_enqueue_and_stored_with_the_job() -> None:
    assert per_customer.prepare("acme", order=3).rate_key == "acme"
    assert per_customer.prepare(42).rate_key == "42"  # an integer key is stored as its text
    assert (per_token.prepare(1).rate_key, per_token.prepare(1).cost) == ("partner-api", 2)
    assert unkeyed.prepare(1).rate_key is None and unkeyed.prepare(1).is_plain  # no key: as before


@pytest.mark.parametrize(("value", "message"), [
    (None, "must return a string or an integer, got NoneType None"),
    (True, "must return a string or an integer, got bool True"),
    (1.5, "must return a string or an integer, got float 1.5"),
    (["a"], "must return a string or an integer, got list"),
    ("", "must be 1-255 characters"),
    ("x" * 256, "must be 1-255 characters"),
    ("a\x00b", "must be 1-255 characters"),
])
def test_a_key_no_window_could_use_is_refused_at_enqueue(value: object, message: str) -> None:
    with pytest.raises(InvalidOption, match=message) as caught:
        per_customer.prepare(value)
    assert "unit.per_customer" in str(caught.value)
    assert per_customer.prepare("x" * 255).rate_key == "x" * 255  # the longest key a column holds


@pytest.mark.parametrize(("options", "message"), [
    ({"rate_limit_key": "k"}, "rate_limit_key needs a rate_limit"),
    ({"rate_limit": "5/s", "rate_limit_key": ""}, "rate_limit_key must be a function of the job's arguments"),
    ({"rate_limit": "5/s", "rate_limit_key": "k" * 256}, "rate_limit_key must be a function"),
])
def test_a_key_no_enqueue_could_use_is_refused_at_definition(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        app.job(name="unit.bad_key", **options)(lambda n: None)  # type: ignore[call-overload]


def test_each_job_and_key_counts_in_its_own_window_under_one_of_a_fixed_set_of_lock_rows() -> None:
    rate = RateLimit(3, 60.0)
    assert Limit.rate("job", None, rate) == Limit("rate", "job", 3, 60.0)  # a job's own window, as before
    keyed = Limit.rate("job", "acme", rate)
    assert keyed.name == rate_window("job", "acme") and len(keyed.name) <= 255
    assert keyed.lock_name == rate_window_lock(keyed.name) and keyed.lock_name.startswith("rate-key:")
    # Another key, the same key of another job, and keys that differ only in trailing spaces (which
    # MariaDB's PAD SPACE comparison would take for one) are other windows.
    others = {rate_window("job", "acme "), rate_window("other", "acme"), rate_window("job", "acme2"),
              rate_window("job", "\udcff")}  # (a lone surrogate, as SQLite reads back bytes that are no UTF-8)
    assert keyed.name not in others and len(others) == 4
    locks = {rate_window_lock(rate_window("job", str(n))) for n in range(2000)}
    assert len(locks) == RATE_KEY_LOCKS  # however many keys, the locks table holds at most this many rows


def test_the_job_page_shows_the_key_and_why_its_window_holds_the_job_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from errands.services.operator import job_detail

    shop = Errands(f"sqlite:///{tmp_path / 'shop.db'}")

    @shop.job(name="unit.sync", rate_limit="1/minute", rate_limit_key=lambda customer_id: customer_id)
    def sync(customer_id: str) -> None: ...

    shop.migrate()
    first, second, other = sync.enqueue("acme"), sync.enqueue("acme"), sync.enqueue("globex")
    claimed = shop.store.jobs.claim("unit-host:1:a", ["default"], 1, 30.0)
    assert [(c.id, c.rate_key) for c in claimed] == [(first.id, "acme")]
    limit = Limit.rate("unit.sync", "acme", RateLimit(1, 60.0))
    assert shop.store.features.admission("unit-host:1:a", [(first.id, [limit])]).admitted == [first.id]
    waiting = job_detail(shop, second.id)
    assert waiting.rate_key == "acme"  # type: ignore[union-attr]
    assert any("its rate limit for key 'acme' is used up (1 of 1 starts" in why for why in waiting.why)
    assert not any("rate limit" in why for why in job_detail(shop, other.id).why)  # globex's window is free
    shop.close()
