"""Job semantics decided without a database: app-wide defaults and their order, retry_on, snooze's cap,
the argument codec, mistakes refused when a job or hook is defined, and how failure hooks are called."""

from __future__ import annotations

import enum
import json
import math
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from errands import (
    BadPayload,
    ConfigurationError,
    Discard,
    Errands,
    FailedJob,
    InvalidOption,
    JobTimeout,
    PayloadNotSerializable,
    Retry,
    Snooze,
)
from errands.core.hooks import Hooks, call_on_dead, call_on_retry
from errands.core.payload import decode_arguments, encode_payload
from errands.core.retry import DEFAULT_MAX_SNOOZES, RetryPolicy, retry_delay
from errands.core.settings import DEFAULTS


@pytest.fixture
def app(tmp_path) -> Errands:
    return Errands(f"sqlite:///{tmp_path / 'unit.db'}")


# ------------------------------------------------------------------------------ the retry decision
def test_retry_on_lets_only_the_listed_types_and_their_subclasses_retry():
    policy = RetryPolicy(retry_on=(ConnectionError,))
    assert retry_delay(1, 3, lambda n: 5.0, error=ConnectionRefusedError(), policy=policy) == 5.0
    assert retry_delay(1, 3, lambda n: 5.0, error=ValueError("bad input"), policy=policy) is None
    assert retry_delay(3, 3, lambda n: 5.0, error=ConnectionError(), policy=policy) is None  # attempts still count
    # a timeout is an error too
    assert retry_delay(1, 3, lambda n: 5.0, error=JobTimeout("slow"), policy=policy) is None
    assert retry_delay(1, 3, lambda n: 5.0, error=Retry(delay=2), policy=policy) == 2.0  # the handler asked
    assert retry_delay(1, 3, lambda n: 5.0, error=None, policy=policy) == 5.0  # no exception (a lost worker): retried


def test_discard_on_keeps_working_and_wins_over_retry_on():
    policy = RetryPolicy(retry_on=(OSError,), discard_on=(FileNotFoundError,))
    assert retry_delay(1, 3, None, error=FileNotFoundError(), policy=policy) is None
    assert retry_delay(1, 3, None, error=PermissionError(), policy=policy) == 0.0
    assert retry_delay(1, 3, None, error=Discard("never"), policy=RetryPolicy()) is None
    assert retry_delay(1, 3, None, error=KeyError("x"), policy=RetryPolicy()) == 0.0  # no retry_on: everything retries


def test_a_snooze_spends_no_attempt_and_is_capped():
    policy = RetryPolicy(max_snoozes=2)
    assert retry_delay(3, 3, None, error=Snooze(30), policy=policy, snoozes=0) == 30.0  # even on the last attempt
    assert retry_delay(3, 3, None, error=Snooze(30), policy=policy, snoozes=1) == 30.0
    assert retry_delay(1, 3, None, error=Snooze(30), policy=policy, snoozes=2) is None
    assert RetryPolicy().max_snoozes == DEFAULT_MAX_SNOOZES == DEFAULTS["max_snoozes"] == 100
    with pytest.raises(ValueError, match="seconds"):
        Snooze(-1)
    with pytest.raises(ConfigurationError, match="retry_on"):
        RetryPolicy(retry_on=("ConnectionError",))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ app-wide defaults
def test_defaults_come_from_the_app_then_the_job_then_the_call(tmp_path):
    app = Errands(f"sqlite:///{tmp_path / 'd.db'}", default_queue="bulk", max_attempts=7, timeout=30.0,
                  backoff="linear", max_snoozes=4)

    @app.job(name="test_job_semantics_rules.inherits")
    def inherits() -> None: ...

    @app.job(name="test_job_semantics_rules.own", queue="mail", max_attempts=2, timeout=math.inf, backoff=1,
             max_snoozes=0)
    def own() -> None: ...

    o = inherits.options
    assert (o.queue, o.max_attempts, o.timeout) == ("bulk", 7, 30.0)
    assert inherits.backoff(2) == 20.0 and inherits.behaviour.policy.max_snoozes == 4
    o = own.options
    assert (o.queue, o.max_attempts, o.timeout) == ("mail", 2, None)  # math.inf: no limit despite the app's
    assert own.backoff(5) == 1.0 and own.behaviour.policy.max_snoozes == 0
    call = inherits.using(queue="now", max_attempts=1, timeout=5).prepare()
    assert (call.queue, call.max_attempts, call.timeout) == ("now", 1, 5)
    assert inherits.using(timeout=math.inf).prepare().timeout is None
    assert inherits.using().prepare().timeout == 30.0  # None in using(): the job's own value stays


def test_the_built_in_defaults_live_in_settings_defaults(app):
    @app.job(name="test_job_semantics_rules.plain")
    def plain() -> None: ...

    assert (plain.options.queue, plain.options.max_attempts, plain.options.timeout) == (
        DEFAULTS["default_queue"], DEFAULTS["max_attempts"], DEFAULTS["timeout"])
    assert plain.backoff(1) == 10.0  # exponential


def test_defaults_from_environment_and_settings_objects(monkeypatch, tmp_path):
    monkeypatch.setenv("ERRANDS_MAX_ATTEMPTS", "9")
    monkeypatch.setenv("ERRANDS_BACKOFF", "1,5,30")
    monkeypatch.setenv("ERRANDS_TIMEOUT", "12.5")
    monkeypatch.setenv("ERRANDS_MAX_SNOOZES", "3")
    monkeypatch.setenv("ERRANDS_DEFAULT_QUEUE", "envq")
    url = f"sqlite:///{tmp_path / 's.db'}"
    app = Errands.from_settings({"ERRANDS_DATABASE_URL": url, "ERRANDS_TIMEOUT": "none"}, pyproject=False)

    @app.job(name="test_job_semantics_rules.job")
    def job() -> None: ...

    assert (job.options.queue, job.options.max_attempts, job.options.timeout) == ("envq", 9, None)
    assert [job.backoff(n) for n in (1, 2, 3, 4)] == [1.0, 5.0, 30.0, 30.0]
    assert job.behaviour.policy.max_snoozes == 3
    app = Errands.from_settings({"database_url": url}, pyproject=False, backoff="fixed", max_attempts=2)
    assert (app.job_defaults.backoff, app.job_defaults.max_attempts) == ("fixed", 2)


@pytest.mark.parametrize(("variable", "value"), [("ERRANDS_MAX_ATTEMPTS", "0"), ("ERRANDS_BACKOFF", "sometimes"),
                                                 ("ERRANDS_TIMEOUT", "-1"), ("ERRANDS_MAX_SNOOZES", "many")])
def test_a_bad_default_stops_the_app_naming_it(monkeypatch, tmp_path, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=variable.removeprefix("ERRANDS_").lower()):
        Errands.from_settings({"database_url": f"sqlite:///{tmp_path / 'x.db'}"}, pyproject=False)


# ------------------------------------------------------------------------------ refused at definition
def test_a_class_is_refused(app):
    with pytest.raises(ConfigurationError, match="not the class .*Report.*handle"):
        @app.job(name="test_job_semantics_rules.handle")
        class Report:
            def handle(self) -> None: ...


def test_generator_functions_are_refused(app):
    with pytest.raises(ConfigurationError, match="generator"):
        @app.job(name="test_job_semantics_rules.rows")
        def rows():
            yield 1

    with pytest.raises(ConfigurationError, match="generator"):
        @app.job(name="test_job_semantics_rules.more_rows")
        async def more_rows():
            yield 1


def test_a_method_written_in_a_class_body_is_refused(app):
    with pytest.raises(ConfigurationError, match="method written in class Mailer.*self"):
        class Mailer:
            @app.job(name="test_job_semantics_rules.send")
            def send(self, to: str) -> None: ...


def test_periodic_arguments_must_fit_the_handler(app):
    with pytest.raises(ConfigurationError, match="periodic job .*report"):
        @app.periodic("0 * * * *", args=[1, 2], name="test_job_semantics_rules.report")
        def report(day: int) -> None: ...
    assert not app.schedules and not [n for n in app.registry if n.endswith("report")]

    @app.periodic("0 * * * *", kwargs={"day": 1}, name="test_job_semantics_rules.fine")
    def fine(day: int) -> None: ...
    assert fine.name in app.schedules


def test_hooks_whose_signature_cannot_take_their_arguments_are_refused(app):
    with pytest.raises(ConfigurationError, match="on_dead hook .*takes neither"):
        app.on_dead(lambda ctx, error_type: None)
    with pytest.raises(ConfigurationError, match="on_retry hook"):
        app.on_retry(lambda ctx, error_type, error_message: None)  # the older call has four arguments
    with pytest.raises(ConfigurationError, match="after hook"):
        app.after_job(lambda ctx: None)
    with pytest.raises(ConfigurationError, match="before hook"):
        app.before_job(lambda: None)


# ------------------------------------------------------------------------------ failure hooks
def test_failure_hooks_get_the_record_or_the_older_arguments_as_their_signature_says():
    hooks = Hooks()
    seen: list[Any] = []
    hooks.on_dead(lambda job: seen.append(("new", job)))
    hooks.on_dead(lambda ctx, error_type, error_message: seen.append(("old", ctx, error_type, error_message)))
    hooks.on_dead(lambda *args: seen.append(("var", args)))  # accepts the older call: gets it
    hooks.on_retry(lambda job: seen.append(("new", job.retry_in)))
    hooks.on_retry(lambda ctx, error_type, error_message, delay: seen.append(("old", delay)))
    record = FailedJob(7, "shop.mail", "mails", (1,), {"to": "a@b"}, "ValueError", "no", 2, 3, None, None)
    call_on_dead([hooks], "ctx", record)
    assert seen == [("new", record), ("old", "ctx", "ValueError", "no"), ("var", ("ctx", "ValueError", "no"))]
    seen.clear()
    call_on_retry([hooks], "ctx", FailedJob(7, "shop.mail", "mails", (), {}, "E", "m", 1, 3, 12.0))
    assert seen == [("new", 12.0), ("old", 12.0)]
    assert record.dead and record.error == "ValueError: no"


# ------------------------------------------------------------------------------ the argument codec
ZONES = st.sampled_from(["UTC", "Europe/Istanbul", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"])
TIMEZONES = (st.none() | st.just(timezone.utc) | ZONES.map(ZoneInfo)
             | st.integers(-23 * 60, 23 * 60).map(lambda m: timezone(timedelta(minutes=m))))
DATETIMES = st.builds(lambda dt, tz, fold: dt.replace(tzinfo=tz, fold=fold),
                      st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)), TIMEZONES,
                      st.sampled_from([0, 1]))
DECIMALS = st.decimals(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [Decimal("-0"), Decimal("1.10"), Decimal("1E+3"), Decimal("sNaN"), Decimal("-NaN12")])
TEXT = st.text(max_size=8) | st.sampled_from(["__type__", "__value__", "codec"])
TYPED = DATETIMES | st.dates() | st.uuids() | DECIMALS
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT
VALUES = st.recursive(SCALARS | TYPED, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(TEXT, inner, max_size=4), max_leaves=15)


def same(a: Any, b: Any) -> bool:
    """Equal, of the same type, and for datetimes with the same tzinfo and fold (``==`` ignores both)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, Decimal):
        return str(a) == str(b)
    if isinstance(a, datetime):
        return (a.replace(tzinfo=None), a.fold, a.tzinfo) == (b.replace(tzinfo=None), b.fold, b.tzinfo)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(args=st.lists(VALUES, max_size=4), kwargs=st.dictionaries(st.text(max_size=5), VALUES, max_size=3))
def test_codec_values_come_back_equal_and_of_the_same_type(args, kwargs):
    payload = encode_payload("j", args, kwargs, 10**7)
    back_args, back_kwargs = decode_arguments(payload)
    assert same(back_args, args) and same(back_kwargs, kwargs), payload


@given(value=st.lists(SCALARS, max_size=5))
def test_plain_json_payloads_carry_no_codec_marker(value):
    assert "codec" not in json.loads(encode_payload("j", value, {}, 10**7))


def test_aware_datetimes_keep_their_offset_or_zone_and_naive_ones_stay_naive():
    values = [datetime(2030, 3, 31, 3, 30, tzinfo=timezone(timedelta(hours=5, minutes=45))),
              datetime(2030, 10, 27, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Berlin")),  # the second 02:30
              datetime(2030, 3, 31, 2, 30, tzinfo=ZoneInfo("Europe/Berlin")),  # a wall time that never happens
              datetime(2030, 1, 1, 12, 0)]
    back, _ = decode_arguments(encode_payload("j", values, {}, 10**6))
    assert all(same(a, b) for a, b in zip(values, back, strict=True))
    assert back[1].utcoffset() == timedelta(hours=1) and back[3].tzinfo is None


class Colour(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    S = 1
    L = 3


class Pair(enum.Enum):
    A = (1, 2)


def test_enum_members_are_refused_unless_the_parameter_is_annotated(app):
    @app.job(name="test_job_semantics_rules.paint")
    def paint(colour, size) -> None: ...

    with pytest.raises(PayloadNotSerializable, match="Colour.RED.*Enum member.*annotate"):
        paint.prepare(Colour.RED, 1)
    with pytest.raises(PayloadNotSerializable, match="Enum member"):
        paint.prepare("red", [Size.L])
    with pytest.raises(PayloadNotSerializable, match="dict key .*Enum"):
        paint.prepare({Colour.RED: 1}, 1)


def test_annotated_enum_parameters_travel_as_values_and_come_back_as_members(app):
    @app.job(name="test_job_semantics_rules.paint")
    def paint(colour: Colour, *sizes: Size, shade: Colour | None = None, **extra: Colour) -> None: ...

    new = paint.prepare(Colour.RED, Size.S, 3, shade=Colour.BLUE, trim="blue")
    assert '"red"' in new.payload and "codec" not in new.payload
    args, kwargs = paint.decode(new.payload)
    assert args == [Colour.RED, Size.S, Size.L] and kwargs == {"shade": Colour.BLUE, "trim": Colour.BLUE}
    assert type(args[0]) is Colour and type(args[2]) is Size
    assert paint.decode(paint.prepare("blue", shade=None).payload) == ([Colour.BLUE], {"shade": None})
    with pytest.raises(InvalidOption, match="'colour' .*annotated Colour.*'green'"):
        paint.prepare("green")
    with pytest.raises(BadPayload, match="no value of Colour"):
        paint.decode('{"args":["green"],"kwargs":{}}')


def test_an_enum_whose_values_json_cannot_carry_is_refused_at_definition(app):
    with pytest.raises(ConfigurationError, match="Pair"):
        @app.job(name="test_job_semantics_rules.pick")
        def pick(pair: Pair) -> None: ...


def test_subclasses_and_foreign_timezones_are_refused_not_changed(app):
    class Stamp(datetime):
        pass

    class Fixed(timezone.__base__):  # a tzinfo errands cannot name again
        def utcoffset(self, dt): return timedelta(hours=1)
        def dst(self, dt): return timedelta(0)
        def tzname(self, dt): return "X"

    with pytest.raises(PayloadNotSerializable, match="subclass of datetime"):
        encode_payload("j", [Stamp(2030, 1, 1)], {}, 10**6)
    with pytest.raises(PayloadNotSerializable, match="tzinfo"):
        encode_payload("j", [datetime(2030, 1, 1, tzinfo=Fixed())], {}, 10**6)
    with pytest.raises(PayloadNotSerializable, match="tzinfo"):
        encode_payload("j", [datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=2), "EET"))], {}, 10**6)


def test_payloads_written_before_the_codec_decode_as_they_always_did():
    old = '{"args":[{"__type__":"datetime","__value__":"2030-01-01T00:00:00"},[1,2]],"kwargs":{"d":"2030-01-01"}}'
    assert decode_arguments(old) == ([{"__type__": "datetime", "__value__": "2030-01-01T00:00:00"}, [1, 2]],
                                     {"d": "2030-01-01"})
    assert decode_arguments(encode_payload("j", [(1, 2)], {}, 100)) == ([[1, 2]], {})  # tuples: lists, as always


@pytest.mark.parametrize("payload", [
    '{"args":[{"__type__":"datetime","__value__":"yesterday"}],"kwargs":{},"codec":1}',
    '{"args":[{"__type__":"pickle","__value__":"x"}],"kwargs":{},"codec":1}',
    '{"args":[{"__type__":"datetime","__value__":"2030-01-01T00:00:00","zone":"../../etc/passwd"}],'
    '"kwargs":{},"codec":1}',
    '{"args":[{"__type__":"dict","__value__":[[[1],2]]}],"kwargs":{},"codec":1}',
])
def test_a_broken_tag_is_bad_payload_never_another_error(payload):
    with pytest.raises(BadPayload):
        decode_arguments(payload)


def test_the_codec_types_round_trip_through_a_definition(app):
    @app.job(name="test_job_semantics_rules.book")
    def book(when: datetime, day: date, ref: UUID, amount: Decimal) -> None: ...

    values = (datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=ZoneInfo("Europe/Istanbul")), date(2030, 5, 6),
              UUID("12345678-1234-5678-1234-567812345678"), Decimal("19.990"))
    args, _ = book.decode(book.prepare(*values).payload)
    assert all(same(a, b) for a, b in zip(values, args, strict=True))
