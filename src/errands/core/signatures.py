"""What a handler's signature tells errands, read once when the job is registered.

* :func:`check_handler` refuses, at ``@app.job``, what would register without error and then
  never do its work: a class (the worker would build an instance and never call its
  ``handle()``), a generator function (the call returns a generator; its body never runs), a
  method written in a class body (the worker has no instance to pass as ``self``).
* :class:`EnumParameters`: the parameters annotated with an Enum class.  JSON has no Enum, and a
  ``str``-based member would come back as a plain ``str``; so at enqueue a member (or a valid raw
  value) of the annotated class is stored as its value, and at run time the value is turned back
  into the member.  An Enum member anywhere else in the arguments is refused at enqueue
  (:mod:`errands.core.payload`).
* :class:`ScalarParameters`: the parameters annotated ``int``, ``float``, ``str`` or ``bool`` (or a
  union of those with None).  JSON would store ``"one"`` for ``order_id: int`` and the handler
  would fail later, on a worker, at every attempt; so the type is checked at enqueue.  Other
  annotations (generics, classes of your own, ``Any``, names that do not resolve) are not checked.
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from .errors import ArgumentTypeError, BadPayload, ConfigurationError, InvalidOption
from .payload import safe_text

_JSON_SCALARS = (str, int, float, bool, type(None))


def check_handler(func: Any) -> inspect.Signature:
    """The handler's signature, or a ConfigurationError saying why ``func`` cannot be a job."""
    name = getattr(func, "__qualname__", None) or safe_text(repr(func), 80)
    if inspect.isclass(func):
        raise ConfigurationError(
            f"@app.job decorates a function, not the class {name}: the worker would only create an "
            f"instance and never call its methods.  Decorate a function that does the work, e.g. "
            f"def {func.__name__.lower()}(...): {name}(...).handle()")
    if not callable(func):
        raise ConfigurationError(f"@app.job decorates a function; {name} is a {type(func).__name__}")
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise ConfigurationError(f"job {name} is a generator function: calling it only creates a generator, so "
                                 "its body would never run; return a value instead of yielding")
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"job {name}: errands cannot read its signature ({exc})") from None
    parts = getattr(func, "__qualname__", "").split(".")
    first = next(iter(signature.parameters), None)
    if inspect.isfunction(func) and len(parts) > 1 and parts[-2] != "<locals>" and first in ("self", "cls"):
        raise ConfigurationError(
            f"job {name} is a method written in class {parts[-2]}: the worker calls the plain function "
            f"and has no instance to pass as {first!r}.  Decorate a module-level function instead")
    return signature


def _enum_class(annotation: Any) -> type[enum.Enum] | None:
    """The Enum class of ``Color``, ``Color | None`` or ``Optional[Color]``; None otherwise."""
    if isinstance(annotation, type):
        return annotation if issubclass(annotation, enum.Enum) else None
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(options) == 1:
            return _enum_class(options[0])
    return None


class EnumParameters:
    """The Enum-annotated parameters of a handler: by position, by name, and for ``*args`` /
    ``**kwargs`` (annotated ``*colors: Color``).  Falsy when there are none (most jobs)."""

    __slots__ = ("job", "positions", "names", "declared", "rest_positional", "rest_keyword", "first_rest")

    def __init__(self, job: str, func: Callable[..., Any], signature: inspect.Signature) -> None:
        self.job = job
        self.positions: dict[int, tuple[str, type[enum.Enum]]] = {}
        self.names: dict[str, type[enum.Enum]] = {}
        self.rest_positional: type[enum.Enum] | None = None
        self.rest_keyword: type[enum.Enum] | None = None
        self.first_rest = 0
        """The index of the first positional argument that ``*args`` takes."""
        self.declared = {n for n, p in signature.parameters.items()
                         if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
        if not any(p.annotation is not inspect.Parameter.empty for p in signature.parameters.values()):
            return
        try:
            hints = typing.get_type_hints(func)
        except Exception:  # an annotation that does not resolve (a name defined later): read them as they are
            hints = {n: p.annotation for n, p in signature.parameters.items()}
        kinds = inspect.Parameter
        for index, (name, param) in enumerate(signature.parameters.items()):
            cls = _enum_class(hints.get(name))
            if param.kind is kinds.VAR_POSITIONAL:
                self.first_rest = index
                self.rest_positional = self._carried(cls, name)
            elif param.kind is kinds.VAR_KEYWORD:
                self.rest_keyword = self._carried(cls, name)
            elif cls is not None:
                self._carried(cls, name)
                if param.kind is not kinds.KEYWORD_ONLY:
                    self.positions[index] = (name, cls)
                if param.kind is not kinds.POSITIONAL_ONLY:
                    self.names[name] = cls

    def _carried(self, cls: type[enum.Enum] | None, name: str) -> type[enum.Enum] | None:
        if cls is not None and not all(type(m.value) in _JSON_SCALARS for m in cls):
            raise ConfigurationError(f"job {self.job}: parameter {name!r} is annotated with {cls.__qualname__}, whose "
                                     "values are not all strings, numbers, booleans or None, so errands cannot "
                                     "carry its members as their values")
        return cls

    def __bool__(self) -> bool:
        return bool(self.positions or self.names or self.rest_positional or self.rest_keyword)

    def _each(self, args: Any, kwargs: dict[str, Any],
              convert: Callable[[type[enum.Enum], Any, str], Any]) -> tuple[list[Any], dict[str, Any]]:
        out = list(args)
        for index, value in enumerate(out):
            name, cls = self.positions.get(index, ("*args", None))
            if cls is None and self.rest_positional is not None and index >= self.first_rest:
                cls = self.rest_positional
            if cls is not None and value is not None:
                out[index] = convert(cls, value, name)
        if kwargs:
            kwargs = dict(kwargs)
            for name, value in kwargs.items():
                cls = self.names.get(name) if name in self.declared else self.rest_keyword
                if cls is not None and value is not None:
                    kwargs[name] = convert(cls, value, name)
        return out, kwargs

    def to_values(self, args: Any, kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """At enqueue: members (or valid raw values) of the annotated classes as their values."""
        return self._each(args, kwargs, self._value)

    def to_members(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """At run time: the stored values as members again (BadPayload for a value of no member)."""
        return self._each(args, kwargs, self._member)

    def _value(self, cls: type[enum.Enum], value: Any, name: str) -> Any:
        if not isinstance(value, cls):
            try:
                value = cls(value)
            except (ValueError, TypeError):
                raise InvalidOption(f"argument {name!r} of job {self.job!r} is annotated {cls.__qualname__}; "
                                    f"{safe_text(repr(value), 80)} is none of its members or values") from None
        return value.value

    def _member(self, cls: type[enum.Enum], value: Any, name: str) -> Any:
        try:
            return cls(value)
        except (ValueError, TypeError):
            raise BadPayload(f"argument {name!r} holds {safe_text(repr(value), 80)}, which is no value of "
                             f"{cls.__qualname__} (the Enum changed since the job was enqueued?)") from None


_SCALAR_TYPES: dict[Any, tuple[type, ...]] = {int: (int,), float: (float, int), str: (str,), bool: (bool,)}
"""The annotations checked at enqueue and the types each accepts (a float parameter takes an int,
and bool is an int, as for a type checker)."""


class _Rule(typing.NamedTuple):
    accepts: tuple[type, ...]
    none: bool
    """None is accepted too (``X | None``, or a default of None)."""
    label: str
    """The annotation as a reader writes it, for the error."""

    def refuse(self, value: Any) -> bool:
        return not isinstance(value, self.accepts) and not (value is None and self.none)


def _scalar_rule(annotation: Any, default: Any) -> _Rule | None:
    """The rule for ``int``, ``str | None``, ``Optional[float]``, ``int | str``...; None when the
    annotation is anything else (not checked)."""
    if isinstance(annotation, type) and annotation in _SCALAR_TYPES:
        options = [annotation]
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = list(typing.get_args(annotation))
        if not all(o is type(None) or (isinstance(o, type) and o in _SCALAR_TYPES) for o in options):
            return None
    else:
        return None
    accepts = tuple(dict.fromkeys(t for o in options if o is not type(None) for t in _SCALAR_TYPES[o]))
    none = type(None) in options or default is None
    label = " | ".join(o.__name__ if o is not type(None) else "None" for o in options)
    return _Rule(accepts, none, label)


def _resolved_hints(func: Callable[..., Any], signature: inspect.Signature) -> dict[str, Any]:
    """The parameters' annotations as objects; one that does not resolve (a name defined later, a
    typo) leaves the others resolved, and is left as its string (which no rule checks)."""
    try:
        return typing.get_type_hints(func)
    except Exception:  # any error of an annotation: resolve the others one by one
        pass
    scope = dict(getattr(func, "__globals__", {}))
    hints: dict[str, Any] = {}
    for name, param in signature.parameters.items():
        hint = param.annotation
        if isinstance(hint, str):
            try:
                hint = eval(hint, scope)  # what typing.get_type_hints does with a string annotation
            except Exception:  # a name that does not resolve (yet): not checked
                pass
        hints[name] = hint
    return hints


class ScalarParameters:
    """The parameters annotated with ``int``, ``float``, ``str``, ``bool`` or a union of them with
    None, by position, by name and for ``*args`` / ``**kwargs``; :meth:`check` refuses an argument
    of another type at enqueue.  Falsy when there are none."""

    __slots__ = ("job", "positional", "names", "declared", "rest_positional", "rest_keyword", "first_rest",
                 "rest_names")

    def __init__(self, job: str, func: Callable[..., Any], signature: inspect.Signature) -> None:
        self.job = job
        self.positional: list[tuple[int, str, _Rule]] = []
        self.names: dict[str, _Rule] = {}
        self.rest_positional: _Rule | None = None
        self.rest_keyword: _Rule | None = None
        self.first_rest = 0
        self.rest_names = ("*args", "**kwargs")
        self.declared = {n for n, p in signature.parameters.items()
                         if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
        if not any(p.annotation is not inspect.Parameter.empty for p in signature.parameters.values()):
            return
        hints = _resolved_hints(func, signature)
        star = [f"*{n}" if p.kind is inspect.Parameter.VAR_POSITIONAL else f"**{n}"
                for n, p in signature.parameters.items()
                if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        self.rest_names = (next((s for s in star if s.count("*") == 1), "*args"),
                           next((s for s in star if s.count("*") == 2), "**kwargs"))
        kinds = inspect.Parameter
        for index, (name, param) in enumerate(signature.parameters.items()):
            rule = _scalar_rule(hints.get(name), param.default)
            if param.kind is kinds.VAR_POSITIONAL:
                self.first_rest, self.rest_positional = index, rule
            elif param.kind is kinds.VAR_KEYWORD:
                self.rest_keyword = rule
            elif rule is not None:
                if param.kind is not kinds.KEYWORD_ONLY:
                    self.positional.append((index, name, rule))
                if param.kind is not kinds.POSITIONAL_ONLY:
                    self.names[name] = rule

    def __bool__(self) -> bool:
        return bool(self.positional or self.names or self.rest_positional or self.rest_keyword)

    def check(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """ArgumentTypeError for the first argument whose type its annotation does not accept
        (the arguments already bind to the signature)."""
        count = len(args)
        for index, name, rule in self.positional:
            if index < count and rule.refuse(args[index]):
                self._refuse(repr(name), rule, args[index])
        rest = self.rest_positional
        if rest is not None:
            for value in args[self.first_rest:]:
                if rest.refuse(value):
                    self._refuse(repr(self.rest_names[0]), rest, value)
        for name, value in kwargs.items():
            declared = name in self.declared
            named = self.names.get(name) if declared else self.rest_keyword
            if named is not None and named.refuse(value):
                self._refuse(repr(name) if declared else f"{name!r} (in {self.rest_names[1]})", named, value)

    def _refuse(self, argument: str, rule: _Rule, value: Any) -> None:
        raise ArgumentTypeError(f"job {self.job!r}: argument {argument} is annotated {rule.label}, got "
                                f"{type(value).__name__} {safe_text(repr(value), 80)}; errands checks int, float, "
                                "str and bool annotations at enqueue")
