"""Limits checked at enqueue, before anything is written, with clear errors; and the payload
boundary's own rules (errands.core.payload), as plain functions."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from errands import BadPayload, Errands, InvalidOption, InvalidQueueName, PayloadNotSerializable
from errands.core.config import check_queue_name
from errands.core.limits import MAX_DELAY, clamp_delay
from errands.core.payload import MAX_DEPTH, decode_arguments, encode_payload, parse_json, safe_text

SURROGATE = b"caf\xe9".decode("utf-8", "surrogateescape")


@pytest.fixture
def lite(tmp_path) -> Errands:  # type: ignore[no-untyped-def]
    app = Errands(f"sqlite:///{tmp_path / 'e.db'}")

    @app.job(name="echo", keep_result=True)
    def echo(*args: object, **kwargs: object) -> object:
        return [list(args), kwargs]

    return app


@pytest.mark.parametrize("options", [
    {"delay": 1e12}, {"delay": 1e308}, {"delay": math.inf}, {"delay": math.nan}, {"delay": -1},
    {"delay": MAX_DELAY + 1}, {"timeout": 1e308}, {"timeout": math.nan}, {"max_attempts": 2**31},
    {"run_at": datetime.now(timezone.utc) + timedelta(days=3700 * 1.0)},
    {"run_at": datetime(1, 1, 1, tzinfo=timezone.utc)}, {"run_at": datetime.max.replace(tzinfo=timezone.utc)},
    {"after": 2**63}, {"unique_key": "key " + SURROGATE}, {"unique_key": "nul\x00"}, {"priority": 2**31},
])
def test_out_of_range_options_are_refused(lite: Errands, options: dict[str, object]) -> None:
    with pytest.raises(InvalidOption):
        lite.get_job("echo").using(**options).enqueue()
    assert lite.store.jobs.list_jobs() == []


def test_the_longest_delay_is_accepted_and_stored(lite: Errands) -> None:
    handle = lite.get_job("echo").using(delay=MAX_DELAY).enqueue()
    row = lite.store.jobs.get_job(handle.id)
    assert row is not None and row.available_at.year >= datetime.now(timezone.utc).year + 9


@pytest.mark.parametrize("name", ["nl\n", ".", "..", "", "a" * 61, "sp ace", "tab\t", "ü", "a/b", None, 5])
def test_bad_queue_names_are_refused(name: object) -> None:
    with pytest.raises(InvalidQueueName):
        check_queue_name(name)


@pytest.mark.parametrize("name", ["default", "...", ".hidden", "a-b_c.d", "A" * 60])
def test_good_queue_names_pass(name: str) -> None:
    assert check_queue_name(name) == name


def test_nesting_is_bounded_at_enqueue(lite: Errands) -> None:
    echo = lite.get_job("echo")
    deep: list[object] = []
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    echo.enqueue(deep)  # MAX_DEPTH levels: fine
    with pytest.raises(PayloadNotSerializable, match="levels deep"):
        echo.enqueue([deep])
    very_deep: list[object] = []
    for _ in range(100_000):
        very_deep = [very_deep]
    with pytest.raises(PayloadNotSerializable):
        echo.enqueue(very_deep)


def test_text_with_surrogates_comes_back_intact(lite: Errands) -> None:
    value = {"k" + SURROGATE: [SURROGATE, "\x00", "\u202egnp.exe", "\U0001F600"]}
    handle = lite.get_job("echo").enqueue(value, s=SURROGATE)
    stored = lite.store.jobs.get_job(handle.id)
    assert stored is not None and stored.payload.isascii()  # escaped, so every driver stores it
    lite.run_until_empty()
    assert handle.result(timeout=5) == [[value], {"s": SURROGATE}]


def test_decoding_never_raises_anything_but_bad_payload() -> None:
    for payload in ("", "{", "[]", "null", '{"args": 1}', '{"args": [], "kwargs": []}', "{}x",
                    '{"args": [' + "[" * 100_000 + "]" * 100_000 + "]}", '{"args": ["' + SURROGATE + '"]}',
                    None, b'{"args": []}', 42):
        with pytest.raises(BadPayload):
            decode_arguments(payload)
    assert decode_arguments(' {"args": [1], "kwargs": {"a": 2}} ') == ([1], {"a": 2})
    assert decode_arguments("{}") == ([], {})


def test_safe_text_makes_anything_storable() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert safe_text(SURROGATE + "\x00") == "caf\ufffd\ufffd"
    assert safe_text(Unprintable()) == "Unprintable()"
    assert safe_text("x" * 5000, 2000) == "x" * 2000
    assert safe_text(ValueError("plain")) == "plain"
    for text in (safe_text(SURROGATE), safe_text(Unprintable())):
        text.encode("utf-8")


def test_typed_json_is_depth_checked_before_decoding() -> None:
    with pytest.raises(ValueError, match="levels deep"):
        parse_json("[" * 5000 + "]" * 5000, "arguments")
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_json("[1,", "arguments")
    assert parse_json('["[[[[", {"a": "]]]"}]', "arguments") == ["[[[[", {"a": "]]]"}]


def test_delays_are_clamped_to_what_every_database_stores() -> None:
    assert clamp_delay(1e308) == MAX_DELAY
    assert clamp_delay(math.inf) == MAX_DELAY
    assert clamp_delay(math.nan) == 0.0
    assert clamp_delay(-5) == 0.0
    assert clamp_delay("soon") == 0.0
    assert clamp_delay(12.5) == 12.5


def test_payload_size_is_counted_in_bytes() -> None:
    with pytest.raises(Exception, match="bytes as JSON"):
        encode_payload("echo", ["é" * 40], {}, 60)
    assert encode_payload("echo", ["é" * 10], {}, 60)
