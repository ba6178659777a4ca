"""Opaque device configuration decoded into the driver's own type: a dataclass, or a model
with ``model_validate`` (pydantic's; this package does not depend on pydantic).

A dataclass is decoded strictly, as Go drivers decode their configuration (the example
driver's decoder is a strict one): the JSON keys are the fields' names in camelCase
(``time_slice`` is ``timeSlice``, ``api_version`` is ``apiVersion``), a key the class does not
have is an error (a misspelt setting must not be silently ignored), a field without a default
must be given, and each value must be of the field's type. A driver that wants ``apiVersion``
and ``kind`` checked gives the class those fields, typed ``Literal[...]``; without them, such
keys are unknown and refused.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, Union, cast

from resourceslice.api import ResourceSliceError

_T = TypeVar("_T")

if sys.version_info >= (3, 10):
    from types import UnionType

    _UNIONS: tuple[object, ...] = (Union, UnionType)
else:
    _UNIONS = (Union,)


class ConfigError(ValueError, ResourceSliceError):
    """Opaque configuration that does not decode into the driver's type; the message says
    where (``parameters.sharing.interval: ...``) and what is wrong."""


def decode_config(parameters: Any, into: type[_T], where: str = "parameters") -> _T:
    """``parameters`` (an opaque configuration's JSON object) as an instance of ``into``.

    ``into``: a dataclass (decoded strictly, see the module doc), or a class with a
    ``model_validate`` class method (a pydantic model), which then decides. ConfigError when
    the parameters do not fit; TypeError when ``into`` is neither.
    """
    validate = getattr(into, "model_validate", None)
    if callable(validate):
        try:
            return cast(_T, validate(parameters))
        except ValueError as exc:  # pydantic's ValidationError is one
            raise ConfigError(f"{where}: {exc}") from exc
    if not (isinstance(into, type) and dataclasses.is_dataclass(into)):
        raise TypeError(f"{into!r} is neither a dataclass nor a model with model_validate")
    return cast(_T, _value(into, parameters, where))


def json_name(field: str) -> str:
    """A Python field name as its JSON key: ``api_version`` -> ``apiVersion``."""
    first, *rest = field.split("_")
    return first + "".join(word[:1].upper() + word[1:] for word in rest)


def _dataclass(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected an object, got {_kind(data)}")
    # get_type_hints resolves annotations written as strings (``from __future__ import
    # annotations``) in the class's own module.
    hints = typing.get_type_hints(cls)
    fields = {json_name(f.name): f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        known = ", ".join(sorted(fields)) or "none"
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} (known: {known})")
    values = {}
    for key, field in fields.items():
        if key in data:
            values[field.name] = _value(hints[field.name], data[key], f"{where}.{key}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}: missing field {key!r}")
    return cls(**values)


def _value(tp: Any, value: Any, where: str) -> Any:
    """``value`` (decoded JSON) checked against the type ``tp``, and built when a class."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{where}: expected null, got {_kind(value)}")
        return None
    if origin in _UNIONS:
        if value is None and type(None) in args:
            return None
        # Optional[X] with a value: X's own problem, not "expected null" beside it.
        arms = [arm for arm in args if arm is not type(None)]
        if len(arms) == 1:
            return _value(arms[0], value, where)
        problems = []
        for arm in arms:
            try:
                return _value(arm, value, where)
            except ConfigError as exc:
                problems.append(str(exc).removeprefix(f"{where}: "))
        raise ConfigError(f"{where}: {' / '.join(problems)}")
    if origin is typing.Literal:
        # True == 1 in Python: a literal matches a value of its own type only.
        if any(type(value) is type(arg) and value == arg for arg in args):
            return value
        raise ConfigError(f"{where}: expected one of {', '.join(map(repr, args))}, got {value!r}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(repr(member.value) for member in tp)
            raise ConfigError(f"{where}: expected one of {allowed}, got {value!r}") from None
    if origin in (list, Sequence):
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {_kind(value)}")
        item = args[0] if args else Any
        return [_value(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected an object, got {_kind(value)}")
        item = args[1] if args else Any
        return {k: _value(item, v, f"{where}.{k}") for k, v in value.items()}
    if tp is bool or tp is str:
        if type(value) is not tp:
            raise ConfigError(f"{where}: expected {_KINDS[tp]}, got {_kind(value)}")
        return value
    if tp is int or tp is float:
        # JSON has one kind of number: 2 is a valid float, 2.5 no int, true neither.
        fits = type(value) is int or (tp is float and type(value) is float)
        if not fits:
            raise ConfigError(f"{where}: expected {_KINDS[tp]}, got {_kind(value)}")
        return tp(value)
    raise TypeError(f"{where}: the configuration type uses {tp!r}, which cannot be decoded")


_KINDS: dict[object, str] = {
    bool: "a boolean",
    str: "a string",
    int: "an integer",
    float: "a number",
    type(None): "null",
    list: "a list",
    dict: "an object",
}


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), type(value).__name__)


__all__ = ["ConfigError", "decode_config"]
