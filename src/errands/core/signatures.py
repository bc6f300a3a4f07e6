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
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from .errors import BadPayload, ConfigurationError, InvalidOption
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
