"""``prepare_desired``'s checks of ``resource.k8s.io/v1`` limits and formats (docs/core.md §3):
what every check stands on.

Every message of the contract is written in this package, each in the module that uses it
(those more than one uses, here); the Rust core uses the same words. Problems are collected
with their path in traversal order (dict members in sorted key order), and a device's
canonical JSON is rendered only once it is known to be valid.

Here: the input as plain data, normalised the way the Rust glue sees it; the error collector
and its paths; the checks of a value's JSON type and of a list's length; the generic rules for
members passed through as they are. The checks stand
on it in floors: ``scalars``, then ``slice`` (node selection, counters, a slice's header),
``device`` and ``pool``, whose ``prepare`` is the entry point.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Callable, Union

from resourceslice._pycore import canonical

INT64 = 1 << 63

# The messages more than one module of checks uses.
NOT_UTF8 = "not valid UTF-8"
NOT_INT64 = "out of range for a 64-bit integer"
IS_FLOAT = "must not be a float"
REQUIRED = "is required"
NOT_STRING = "must be a string"
NOT_BOOLEAN = "must be a boolean"
NOT_INTEGER = "must be an integer"
NOT_OBJECT = "must be an object"
NOT_LIST = "must be a list"
DUPLICATE = "duplicate"
NEGATIVE = "must not be negative"
NOT_POSITIVE = "must be positive"


def unsupported_type(type_name: str) -> str:
    return f"unsupported type {type_name}"


# Input as plain data, normalised the way the Rust glue sees it.


class _Marker:
    """A value the checks refuse, remembered by kind (and type name for others)."""

    def __init__(self, kind: str, type_name: str = "") -> None:
        self.kind = kind
        self.type_name = type_name


BIG_INT = _Marker("bigint")
FLOAT = _Marker("float")
BAD_STR = _Marker("badstr")

Node = Union[None, bool, int, str, _Marker, list["Node"], dict[str, "Node"]]


def _utf8_ok(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def to_node(obj: Any) -> Node:
    """Python data -> the input tree: dict members sorted, refused values marked."""
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, str):
        return obj if _utf8_ok(obj) else BAD_STR
    if isinstance(obj, int):
        return int(obj) if -INT64 <= obj < INT64 else BIG_INT
    if isinstance(obj, float):
        return FLOAT
    if isinstance(obj, dict):
        return dict(sorted((node_entry(k, v) for k, v in obj.items()), key=lambda kv: kv[0]))
    if isinstance(obj, (list, tuple)):
        return [to_node(x) for x in obj]
    return _Marker("other", type(obj).__name__)


def node_entry(key: Any, value: Any) -> tuple[str, Node]:
    if isinstance(key, str) and _utf8_ok(key):
        return key, to_node(value)
    return str(key), _Marker("other", f"{type(key).__name__} key")


def to_value(node: Node) -> Any:
    """An input tree without marked values -> JSON data."""
    if isinstance(node, dict):
        return {k: to_value(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_value(v) for v in node]
    return node


def is_clean(node: Node) -> bool:
    if isinstance(node, _Marker):
        return False
    if isinstance(node, dict):
        return all(is_clean(v) for v in node.values())
    if isinstance(node, list):
        return all(is_clean(v) for v in node)
    return True


# The error collector.

_Seg = Union[tuple[str, str], int]


class Errors:
    """The problems found so far, each with the path where it was found."""

    def __init__(self) -> None:
        self.path: list[_Seg] = []
        self.list: list[str] = []

    def report(self, problem: str) -> None:
        parts: list[str] = []
        for i, seg in enumerate(self.path):
            if isinstance(seg, int):
                parts.append(f"[{seg}]")
            elif seg[0] == "field":
                parts.append(seg[1] if i == 0 else f".{seg[1]}")
            else:
                parts.append(f"[{canonical.quote(seg[1])}]")
        self.list.append(f"{''.join(parts)}: {problem}")

    @contextmanager
    def at(self, seg: _Seg) -> Iterator[None]:
        self.path.append(seg)
        try:
            yield
        finally:
            self.path.pop()

    def field(self, name: str) -> Any:
        return self.at(("field", name))

    def key(self, name: str) -> Any:
        return self.at(("key", name))


def get_member(entries: dict[str, Node], key: str) -> Node:
    return entries.get(key)


# The checks of a value's JSON type, and of a list's length.


def check_str(e: Errors, v: Node) -> str | None:
    if isinstance(v, str):
        return v
    e.report(NOT_UTF8 if v is BAD_STR else NOT_STRING)
    return None


def check_bool(e: Errors, v: Node) -> bool | None:
    if isinstance(v, bool):
        return v
    e.report(NOT_BOOLEAN)
    return None


def check_int(e: Errors, v: Node) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    e.report(NOT_INT64 if v is BIG_INT else IS_FLOAT if v is FLOAT else NOT_INTEGER)
    return None


def check_dict(e: Errors, v: Node) -> dict[str, Node] | None:
    if isinstance(v, dict):
        return v
    e.report(NOT_OBJECT)
    return None


def check_list(e: Errors, v: Node) -> list[Node] | None:
    if isinstance(v, list):
        return v
    e.report(NOT_LIST)
    return None


def too_many(limit: int, what: str, got: int) -> str:
    return f"at most {limit} {what}, got {got}"


def check_max(e: Errors, items: Any, limit: int, what: str) -> bool:
    if len(items) > limit:
        e.report(too_many(limit, what, len(items)))
        return False
    return True


# The generic rules.


def check_generic(e: Errors, v: Node) -> None:
    """The generic rules, for members passed through as they are."""
    if v is BIG_INT:
        e.report(NOT_INT64)
    elif v is FLOAT:
        e.report(IS_FLOAT)
    elif v is BAD_STR:
        e.report(NOT_UTF8)
    elif isinstance(v, _Marker):
        e.report(unsupported_type(v.type_name))
    elif isinstance(v, list):
        for i, item in enumerate(v):
            with e.at(i):
                check_generic(e, item)
    elif isinstance(v, dict):
        for k, item in v.items():
            with e.key(k):
                check_generic(e, item)


def check_members(
    e: Errors, entries: dict[str, Node], special: Mapping[str, Callable[[Errors, Node], Any]]
) -> None:
    for k, item in entries.items():
        if item is None:
            continue
        with e.field(k):
            special.get(k, check_generic)(e, item)


def list_len(v: Node) -> int:
    return len(v) if isinstance(v, list) else 0
