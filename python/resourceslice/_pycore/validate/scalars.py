"""The checks of one value: string, boolean, integer, object, list, quantity, version, a
bounded list of unique names, an attribute or capacity name; and their messages.

The checks of a device, a slice and a pool are made of these. The Kubernetes name rules
other modules share are in ``resourceslice._names``.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from resourceslice._names import ascii_full, is_driver_name, utf8_len
from resourceslice._pycore import canonical
from resourceslice._pycore.quantity import parse_quantity
from resourceslice._pycore.validate import (
    BAD_STR,
    BIG_INT,
    DUPLICATE,
    FLOAT,
    IS_FLOAT,
    NOT_INT64,
    NOT_UTF8,
    REQUIRED,
    Errors,
    Node,
    get_member,
)

MAX_VALUE_LENGTH = 64
MAX_ID_LENGTH = 32
#: Quantities in the rules of a request policy are counted in nano units; the policy's
#: numbers must be below 10^20 (a client-side limit: exact arithmetic in 128 bits).
NANO = 10**9
POLICY_LIMIT = 10**20 * NANO

NOT_STRING = "must be a string"
NOT_BOOLEAN = "must be a boolean"
NOT_INTEGER = "must be an integer"
NOT_OBJECT = "must be an object"
NOT_LIST = "must be a list"
BAD_DOMAIN = "the domain must be a DNS subdomain of at most 63 characters"
BAD_ID = "the name must be a C identifier of at most 32 characters"
BAD_VERSION = "must be a semantic version (semver 2.0.0)"


def invalid_quantity(text: str) -> str:
    return f"invalid quantity {canonical.quote(text)}"


def too_many(limit: int, what: str, got: int) -> str:
    return f"at most {limit} {what}, got {got}"


def too_long() -> str:
    return f"must be at most {MAX_VALUE_LENGTH} bytes"


_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(-(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)


def _is_c_identifier(s: str) -> bool:
    return utf8_len(s) <= MAX_ID_LENGTH and ascii_full(_C_IDENTIFIER, s)


def qualified_name_problems(name: str, lower_case: bool = False) -> list[str]:
    """An attribute or capacity name: a C identifier, optionally after ``<driver name>/``
    (in lower case where the server's declarative rules check it). Like the server, a name
    with more than one slash is not looked at."""
    parts = name.split("/")
    if len(parts) == 1:
        return [] if _is_c_identifier(name) else [BAD_ID]
    if len(parts) > 2:
        return []
    domain_ok = is_driver_name(parts[0]) and not (lower_case and parts[0] != parts[0].lower())
    problems = [] if domain_ok else [BAD_DOMAIN]
    if not _is_c_identifier(parts[1]):
        problems.append(BAD_ID)
    return problems


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


def check_quantity(e: Errors, v: Node) -> int | None:
    """A quantity (string or integer); its value in nano units when it is one, beyond
    ``POLICY_LIMIT`` in magnitude kept at that bound (with its sign)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return _clamp(v * NANO)
    s = check_str(e, v)
    if s is None:
        return None
    q = parse_quantity(s)
    if q is None:
        e.report(invalid_quantity(s))
        return None
    if q.key == "0":
        return 0
    mantissa, _, exponent = q.key.partition("e")
    # Go rounds to nano units, so the exponent is at least -9; above 10^20 the exact
    # value is not needed.
    return _clamp(int(mantissa) * 10 ** max(0, min(int(exponent) + 9, 40)))


def _clamp(nano: int) -> int:
    return max(-POLICY_LIMIT, min(POLICY_LIMIT, nano))


def check_max(e: Errors, items: Any, limit: int, what: str) -> bool:
    if len(items) > limit:
        e.report(too_many(limit, what, len(items)))
        return False
    return True


def _check_value_length(e: Errors, s: str) -> None:
    if utf8_len(s) > MAX_VALUE_LENGTH:
        e.report(too_long())


def _check_version(e: Errors, s: str) -> None:
    if not ascii_full(_SEMVER, s):
        e.report(BAD_VERSION)
    _check_value_length(e, s)


def check_scalar(e: Errors, kind: str, v: Node) -> None:
    if kind == "bool":
        check_bool(e, v)
    elif kind == "int":
        check_int(e, v)
    elif (s := check_str(e, v)) is not None:
        (_check_value_length if kind == "string" else _check_version)(e, s)


def quantities(
    e: Errors, entries: dict[str, Node], keys: tuple[str, ...]
) -> tuple[dict[str, int], bool]:
    """The quantities at ``keys`` that are present, and whether all of them parse."""
    values: dict[str, int] = {}
    ok = True
    for k in keys:
        raw = entries.get(k)
        if raw is not None:
            with e.field(k):
                q = check_quantity(e, raw)
            if q is None:
                ok = False
            else:
                values[k] = q
    return values, ok


def check_named(e: Errors, v: Node, valid: Callable[[str], bool], problem: str) -> str | None:
    s = check_str(e, v)
    if s is not None and not valid(s):
        e.report(problem)
    return s


def check_required_named(
    e: Errors, entries: dict[str, Node], key: str, valid: Callable[[str], bool], problem: str
) -> str | None:
    """A string member the server requires: absent or empty is "required"."""
    with e.field(key):
        raw = entries.get(key)
        if raw is None or raw == "":
            e.report(REQUIRED)
            return None
        return check_named(e, raw, valid, problem)


def check_unique_names(
    e: Errors, v: Node, valid: Callable[[str], bool], problem: str, limit: int | None, what: str
) -> list[str]:
    """A list of names, each valid and unique, at most ``limit``; the strings among them."""
    items = check_list(e, v)
    if items is None:
        return []
    if limit is not None:
        check_max(e, items, limit, what)
    names: list[str] = []
    for i, x in enumerate(items):
        with e.at(i):
            s = check_named(e, x, valid, problem)
            if s is not None:
                if s in names:
                    e.report(DUPLICATE)
                names.append(s)
    return names


def optional_bool(e: Errors, entries: dict[str, Node], key: str) -> bool:
    raw = get_member(entries, key)
    if raw is None:
        return False
    with e.field(key):
        return bool(check_bool(e, raw))
