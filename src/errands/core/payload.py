"""The payload format, and the one boundary untrusted text crosses on its way in and out.

A job's arguments travel as one JSON object, ``{"args": [...], "kwargs": {...}}``, optionally
with ``"headers": {...}`` that an enqueue hook added (a trace context, say).  This module alone
writes that text and reads it back; the store moves it as an opaque string.

The codec (docs/features/arguments.md): JSON's own values travel as they are.  ``datetime``,
``date``, ``UUID`` and ``Decimal`` travel as tagged objects, ``{"__type__": "datetime",
"__value__": "2030-01-02T03:04:05+02:00"}``, and come back equal and of the same type (an aware
datetime keeps its offset, or its ``zoneinfo`` zone; a naive one stays naive).  A dict of the
arguments' own that has a ``"__type__"`` key is tagged too (``"dict"``, its items as pairs), so no
argument can pass for a tag.  A payload holding any tag says so with ``"codec": 1``: only then does
the reader look for tags, so payloads written before the codec (and plain ones) decode as always,
at the cost of one dict lookup.  Enum members and every other type are refused at enqueue
(:class:`~errands.core.jobs.JobDefinition` turns the members of an Enum its handler's parameter
is annotated with into their values first, and back at run time).

Everything read back from a row is untrusted: another program may have written it with raw SQL,
a disk may have flipped a byte, SQLite keeps whatever bytes it is given in a TEXT column.  So
the readers here never raise anything but :class:`~errands.core.errors.BadPayload`, and the worker
sends such a job to the dead letter with that short message.  Everything written to a row must be
storable by every driver: lone surrogates (``bytes.decode(..., "surrogateescape")``) cannot be
encoded as UTF-8 and NUL cannot live in a PostgreSQL text column, so free text (error messages,
a handler's exception) goes through :func:`safe_text`, and JSON is written with ``\\u`` escapes
for the surrogates a value holds, which decode back to the very same string.
"""

from __future__ import annotations

import enum
import json
import json.scanner
import re
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from .errors import BadPayload, CheckpointTooLarge, InvalidOption, PayloadNotSerializable, PayloadTooLarge

MAX_DEPTH = 64
"""Nesting levels of lists and objects a job's arguments may use.  Far beyond what real
arguments need, and far below the depth at which Python's JSON decoder (which recurses) fails
in a worker thread."""
HEADERS_KEY = "headers"
"""The payload key that carries an enqueue's headers next to ``args`` and ``kwargs``."""
HEADERS_LIMIT = 4096
"""Bytes of JSON the headers of one enqueue may take (they are not counted in ``payload_limit``)."""
ERROR_TEXT_CAP = 2000
"""Characters of an error message kept with a job (the traceback goes to the worker's log)."""
CHECKPOINT_LIMIT = 65536
"""Bytes of JSON (UTF-8) one checkpoint may take: a cursor (an id, an offset, a few counters), not the
data itself.  Every checkpoint is an UPDATE of the job's row, and every claim of the job reads it."""
REPLACEMENT = "\ufffd"
CODEC_KEY = "codec"
"""The payload key saying that tagged values are inside (see the module docstring)."""
TYPE_KEY, VALUE_KEY = "__type__", "__value__"
"""The keys of a tagged value."""

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""Made once: ``json.dumps`` with options builds a new encoder on every call."""
_ascii_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)
"""For the rare value holding lone surrogates: ``\\udcxx`` escapes are valid JSON and UTF-8."""


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


try:  # the C encoder behind JSONEncoder, built once: encode() builds a new one on every call
    from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]

    _c_encode = c_make_encoder(None, _refuse, encode_basestring, None, ":", ",", False, False, False) \
        if c_make_encoder is not None else None
except ImportError:  # pragma: no cover - Python builds without the _json accelerator
    _c_encode = None

_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
"""The C scanner behind ``json.loads``, called directly: ``loads`` spends two thirds of its
time on wrappers (type checks, whitespace regexes) for a payload as short as most are."""

_SURROGATES = re.compile("[\ud800-\udfff]")
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
"""Strings (skipped whole, so a bracket inside one does not count) and brackets."""


# ---------------------------------------------------------------------------------- writing
def _encode(value: Any) -> str:
    """Compact JSON (no NaN, no ASCII escaping) that every driver can store.

    Without a cycle check: a cyclic structure raises RecursionError, which callers treat like
    any value JSON cannot hold."""
    text = _encoder.encode(value) if _c_encode is None else "".join(_c_encode(value, 0))
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: escape them (the value decodes back intact)
            text = _ascii_encoder.encode(value)
    return text


def json_depth(text: str) -> int:
    """How deeply lists and objects nest in JSON ``text`` (0 for a scalar), without decoding it."""
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif token in "]}":
            depth -= 1
    return deepest


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON ``text`` nests deeper than ``limit``; free for text with few brackets."""
    if text.count("[") + text.count("{") <= limit:
        return False
    return json_depth(text) > limit


def encode_payload(name: str, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any], limit: int) -> str:
    """Arguments as compact JSON; refuse what the codec cannot carry, what nests too deeply, what is too big."""
    try:
        if (type(args[0]) in _PLAIN if len(args) == 1 else _PLAIN.issuperset(map(type, args))) \
                and (not kwargs or _PLAIN.issuperset(map(type, kwargs.values()))):
            payload = _encode({"args": list(args), "kwargs": kwargs})  # the usual case: no tag possible
        else:
            tagger = _Tagger()
            data: dict[str, Any] = {"args": tagger.list(args), "kwargs": tagger.dict(kwargs)}
            if tagger.tagged:
                data[CODEC_KEY] = 1
            payload = _encode(data)
    except _Refused as exc:
        raise PayloadNotSerializable(f"arguments of job {name!r} cannot be stored: {exc}") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadNotSerializable(f"arguments of job {name!r} cannot be stored as JSON: "
                                     f"{safe_text(exc, 300)}") from None
    size = len(payload) if payload.isascii() else len(payload.encode("utf-8"))
    if size > limit:
        raise PayloadTooLarge(f"arguments of job {name!r} take {size} bytes as JSON, over the limit of "
                              f"{limit} bytes; store large data elsewhere and pass a reference")
    # One level for the payload object and one for its args list: MAX_DEPTH is the arguments' own.
    if too_deep(payload, MAX_DEPTH + 2):
        raise PayloadNotSerializable(f"arguments of job {name!r} nest lists and objects more than {MAX_DEPTH} "
                                     "levels deep")
    return payload


# ---------------------------------------------------------------------------------- the codec
_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Types JSON carries as they are (exact types: a subclass, an Enum member say, is no plain value)."""


class _Refused(TypeError):
    """A value the codec will not carry, with the reason and what to do instead."""


def _describe(value: Any) -> str:
    kind = type(value)
    return f"{safe_text(repr(value), 80)} (a {kind.__module__}.{kind.__qualname__})"


class _Tagger:
    """Turns arguments into JSON's values and tagged objects; ``tagged`` once it wrote a tag."""

    __slots__ = ("tagged",)

    def __init__(self) -> None:
        self.tagged = False

    def list(self, values: Any) -> list[Any]:
        if _PLAIN.issuperset(map(type, values)):
            return list(values)
        return [self.value(v) for v in values]

    def dict(self, mapping: dict[Any, Any]) -> dict[Any, Any] | dict[str, Any]:
        for key in mapping:
            if type(key) not in _PLAIN:
                if isinstance(key, enum.Enum):
                    raise _Refused(f"the dict key {_describe(key)} is an Enum member, which JSON would turn "
                                   f"into a plain {type(key.value).__name__}; use its value as the key")
                if not isinstance(key, (str, int, float)):
                    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
        if TYPE_KEY in mapping:  # the arguments' own "__type__" key: tag the dict, so it is no tag
            self.tagged = True
            return {TYPE_KEY: "dict", VALUE_KEY: [[k, self.value(v)] for k, v in mapping.items()]}
        if _PLAIN.issuperset(map(type, mapping.values())):
            return mapping
        return {k: self.value(v) for k, v in mapping.items()}

    def value(self, value: Any) -> Any:
        kind = type(value)
        if kind in _PLAIN:
            return value
        if kind is list or kind is tuple:
            return self.list(value)
        if kind is dict:
            return self.dict(value)
        tag = _tag_of(value)
        if tag is not None:
            self.tagged = True
            return tag
        if isinstance(value, enum.Enum):
            raise _Refused(f"{_describe(value)} is an Enum member, which would come back as its plain value; "
                           f"annotate the handler's parameter with {kind.__qualname__} (errands then passes "
                           f"{kind.__qualname__}(value) to it), or pass {safe_text(repr(value), 40)}.value")
        if isinstance(value, (datetime, date, UUID, Decimal)):
            base = next(t for t in (datetime, date, UUID, Decimal) if isinstance(value, t))
            raise _Refused(f"{_describe(value)} is a subclass of {base.__name__} and would come back as a plain "
                           f"{base.__name__}; pass a {base.__module__}.{base.__name__}")
        if isinstance(value, (str, int, float)):
            return value  # another str/int/float subclass: JSON carries its plain value, as it always did
        if isinstance(value, (list, tuple)):
            return self.list(value)
        if isinstance(value, dict):
            return self.dict(value)
        raise TypeError(f"Object of type {kind.__name__} is not JSON serializable")


def _tag_of(value: Any) -> dict[str, Any] | None:
    """The tagged object of a datetime, date, UUID or Decimal (exact types); None for anything else."""
    kind = type(value)
    if kind is datetime:
        return _datetime_tag(value)
    if kind is date:
        return {TYPE_KEY: "date", VALUE_KEY: value.isoformat()}
    if kind is UUID:
        return {TYPE_KEY: "uuid", VALUE_KEY: str(value)}
    if kind is Decimal:
        return {TYPE_KEY: "decimal", VALUE_KEY: str(value)}
    return None


def _datetime_tag(value: datetime) -> dict[str, Any]:
    tag: dict[str, Any] = {TYPE_KEY: "datetime", VALUE_KEY: value.isoformat()}
    tz = value.tzinfo
    if tz is not None:
        if type(tz) is ZoneInfo and tz.key is not None:
            tag["zone"] = tz.key  # the wall time and the zone: a DST rule, not only today's offset
        elif type(tz) is not timezone or tz.tzname(None) != timezone(tz.utcoffset(None)).tzname(None):
            raise _Refused(f"{_describe(value)} has a tzinfo errands cannot restore ({_describe(tz)}); "
                           "use datetime.timezone (a fixed offset, UTC) or zoneinfo.ZoneInfo")
    if value.fold:
        tag["fold"] = 1
    return tag


def _untag(value: Any) -> Any:
    """A decoded value of a payload that says ``"codec"``, with its tagged objects restored."""
    kind = type(value)
    if kind is list:
        return [_untag(v) for v in value]
    if kind is not dict:
        return value
    tag = value.get(TYPE_KEY)
    if tag is None:
        return {k: _untag(v) for k, v in value.items()}
    raw = value.get(VALUE_KEY)
    try:
        if tag == "dict" and type(raw) is list:
            return {k: _untag(v) for k, v in raw}
        if type(raw) is str:
            if tag == "datetime":
                restored = datetime.fromisoformat(raw)
                zone = value.get("zone")
                if zone is not None:
                    restored = restored.replace(tzinfo=ZoneInfo(zone))
                return restored.replace(fold=1) if value.get("fold") == 1 else restored
            if tag == "date":
                return date.fromisoformat(raw)
            if tag == "uuid":
                return UUID(raw)
            if tag == "decimal":
                return Decimal(raw)
    except Exception as exc:  # a tag written by hand: any fault is the payload's
        raise BadPayload(f"the stored payload holds a {safe_text(tag, 40)} that cannot be read: "
                         f"{safe_text(exc, 200)}") from None
    raise BadPayload(f"the stored payload holds a tagged value errands does not know: {safe_text(value, 200)}")


def encode_result(value: Any) -> str:
    """A handler's return value as JSON (stored in the results table), through the same codec as
    arguments: a datetime, date, UUID or Decimal comes back as one (from ``result()`` and in the
    steps that receive it), an Enum member is refused rather than turned into its plain value.
    TypeError or ValueError (RecursionError included) when the codec cannot carry it.

    Tagged objects need no marker at the top: the codec tags every dict of the value that holds
    ``"__type__"`` itself, so a ``"__type__"`` key in the stored JSON is always one of errands' tags."""
    try:
        if type(value) in _PLAIN:
            return _encode(value)
        return _encode(_Tagger().value(value))
    except RecursionError as exc:
        raise ValueError(f"nested too deeply: {exc}") from None


def encode_checkpoint(value: Any, limit: int = CHECKPOINT_LIMIT) -> str:
    """A handler's checkpoint as JSON, through the codec of results (a datetime or a Decimal comes back
    as one).  TypeError when the codec cannot carry it; CheckpointTooLarge over ``limit`` bytes."""
    try:
        text = encode_result(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a checkpoint must be a value errands can store as JSON (JSON values, datetime, "
                        f"date, UUID, Decimal): {safe_text(exc, 200)}") from None
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > limit:
        raise CheckpointTooLarge(f"the checkpoint takes {size} bytes as JSON, over the limit of {limit}: keep a "
                                 "cursor (an id, an offset), not the data itself")
    if too_deep(text):
        raise TypeError(f"a checkpoint may nest lists and objects at most {MAX_DEPTH} levels deep")
    return text


def encode_headers(headers: dict[str, str]) -> str:
    """The ``"headers":{...}`` member an enqueue hook's headers add to each payload."""
    if not isinstance(headers, dict) or not all(type(k) is str and type(v) is str for k, v in headers.items()):
        raise InvalidOption(f"enqueue headers must map strings to strings, got {headers!r}")
    text = _encode(headers)
    size = len(text.encode("utf-8"))
    if size > HEADERS_LIMIT:
        raise InvalidOption(f"enqueue headers take {size} bytes as JSON, over the limit of {HEADERS_LIMIT}")
    return f'"{HEADERS_KEY}":{text}'


def with_headers(payload: str, member: str) -> str:
    """``payload`` with an :func:`encode_headers` member added (unchanged if it is no JSON object)."""
    payload = payload.rstrip()
    if not payload.endswith("}"):  # not errands' JSON object (refused at run time anyway)
        return payload
    return f"{payload[:-1]},{member}}}"


# ---------------------------------------------------------------------------------- reading
def _load(text: Any) -> Any:
    """Any JSON value from stored text; BadPayload for everything that is not valid JSON in valid UTF-8."""
    if type(text) is not str:
        if isinstance(text, str):
            text = str(text)
        else:
            raise BadPayload(f"the stored payload is {type(text).__name__}, not text")
    try:
        data, end = _scan(text, 0)
    except (StopIteration, TypeError, ValueError):
        data, end = None, -1
    except RecursionError:
        raise BadPayload("the stored payload nests too deeply to decode") from None
    if end != len(text):
        try:
            data = json.loads(text)  # surrounding whitespace is fine; anything else is refused here
        except RecursionError:
            raise BadPayload("the stored payload nests too deeply to decode") from None
        except ValueError as exc:
            raise BadPayload(f"the stored payload is not valid JSON: {safe_text(exc, 200)}") from None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # SQLite handed back bytes that are not UTF-8 (see store.sqlite)
            raise BadPayload("the stored payload is not valid UTF-8") from None
    return data


def decode_arguments(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """``(args, kwargs)`` from a stored payload; :class:`BadPayload` (a ValueError) if it is not
    errands' JSON shape.  Never raises anything else, whatever the row holds."""
    if type(payload) is str and payload.isascii():  # the per-job hot path: one call of the C scanner
        try:
            data, end = _scan(payload, 0)
        except (StopIteration, ValueError, RecursionError):
            end = -1
        if end == len(payload) and type(data) is dict and CODEC_KEY not in data:
            args = data.get("args", [])
            kwargs = data.get("kwargs", {})
            if type(args) is list and type(kwargs) is dict:
                return args, kwargs
    data = _load(payload)
    if type(data) is not dict:
        raise BadPayload(f"expected a JSON object with args and kwargs, got {type(data).__name__}")
    args = data.get("args", [])
    kwargs = data.get("kwargs", {})
    if type(args) is not list or type(kwargs) is not dict:
        raise BadPayload("args must be a JSON array and kwargs a JSON object")
    if CODEC_KEY in data:
        try:
            return _untag(args), _untag(kwargs)
        except RecursionError:
            raise BadPayload("the stored payload nests too deeply to decode") from None
    return args, kwargs


def with_inputs(payload: Any, *, first: Any = None, has_first: bool = False,
                keywords: dict[str, Any] | None = None) -> str:
    """The payload with a value put in front of its positional arguments and/or keyword
    arguments added: how a workflow step receives the results it waits for, and a failure
    callback the record of the failed job.  Values are JSON as stored (results are stored in
    this same format), so nothing is converted on the way; headers stay."""
    data = _load(payload)
    if type(data) is not dict:
        raise BadPayload(f"expected a JSON object with args and kwargs, got {type(data).__name__}")
    args, kwargs = data.get("args", []), data.get("kwargs", {})
    if type(args) is not list or type(kwargs) is not dict:
        raise BadPayload("args must be a JSON array and kwargs a JSON object")
    # The values are plain JSON; one of their dicts with a "__type__" key must not pass for a tag.
    tagger = _Tagger()
    if has_first:
        data["args"] = [tagger.value(first), *args]
    if keywords:
        data["kwargs"] = {**kwargs, **{k: tagger.value(v) for k, v in keywords.items()}}
    if tagger.tagged:
        data[CODEC_KEY] = 1
    return _encode(data)


def decode_result(text: Any) -> Any:
    """A stored return value with its tagged objects restored (see :func:`encode_result`);
    BadPayload when the stored text is not valid JSON or holds a tag errands cannot read."""
    data = _load(text)
    if type(data) is not dict and type(data) is not list:
        return data
    try:
        return _untag(data)
    except RecursionError:
        raise BadPayload("the stored result nests too deeply to decode") from None


def decode_checkpoint(text: Any) -> Any:
    """A stored checkpoint (None: none); BadPayload, saying so, when the row holds something else."""
    if text is None:
        return None
    try:
        return decode_result(text)
    except BadPayload as exc:
        raise BadPayload(f"the stored checkpoint cannot be read: {exc}") from None


def read_headers(payload: Any) -> dict[str, str]:
    """The headers an enqueue hook stored in ``payload`` ({} if none, or if it cannot be read)."""
    if type(payload) is not str or f'"{HEADERS_KEY}":' not in payload:  # most jobs carry none: no decode
        return {}
    try:
        data = _load(payload)
    except BadPayload:
        return {}
    headers = data.get(HEADERS_KEY) if type(data) is dict else None
    if type(headers) is not dict:
        return {}
    return {k: v for k, v in headers.items() if type(v) is str}


def without_headers(payload: Any) -> str:
    """The payload as compact JSON without the headers an enqueue hook added (for log lines);
    the stored text itself when it cannot be decoded."""
    text = safe_text(payload)
    if f'"{HEADERS_KEY}":' not in text and f'"{CODEC_KEY}":' not in text:
        return text
    try:
        data = _load(payload)
    except BadPayload:
        return text
    if type(data) is not dict:
        return text
    data.pop(HEADERS_KEY, None)
    data.pop(CODEC_KEY, None)
    return _encode(data)


def for_display(payload: Any) -> Any:
    """A stored payload decoded for people (dashboard, CLI): its JSON value, or the text itself
    (made safe to print) when it cannot be decoded: the worker buries such a job as BadPayload."""
    try:
        return _load(payload)
    except BadPayload:
        return safe_text(payload, 10_000)


def parse_json(text: str, what: str) -> Any:
    """JSON a person typed (a form field, a CLI option), refused with a clear ValueError when it is
    not JSON or nests more than MAX_DEPTH levels (before it reaches the recursive decoder)."""
    if too_deep(text, MAX_DEPTH + 1):
        raise ValueError(f"{what} nest lists and objects more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{what} nest too deeply") from None
    except ValueError as exc:
        raise ValueError(f"{what} are not valid JSON: {exc}") from None


# ---------------------------------------------------------------------------------- free text
def safe_text(value: Any, cap: int | None = None) -> str:
    """``value`` as text every driver, log and page can hold: lone surrogates and NUL become U+FFFD,
    at most ``cap`` characters.  Never raises, even for an object whose ``__str__`` does."""
    if type(value) is not str:
        try:
            value = str(value)
        except Exception:  # an exception type whose __str__ raises
            try:
                value = repr(value)
            except Exception:
                value = f"<{type(value).__name__} that cannot be shown>"
        if not isinstance(value, str):  # a __str__ that returned a str subclass is fine; None is not
            value = f"<{type(value).__name__}>"
        value = str.__str__(value)
    if cap is not None and len(value) > cap:
        value = value[:cap]
    if "\x00" in value:
        value = value.replace("\x00", REPLACEMENT)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = _SURROGATES.sub(REPLACEMENT, value)
    text: str = value
    return text
