"""The checks of one value's format: quantity, version, a bounded list of unique names, an
attribute or capacity name, a node allocatable resource's name; and their messages (a
value's JSON type is checked in the package's ``__init__``, as in the Rust core).

The checks of a device, a slice and a pool are made of these. The Kubernetes name rules
other modules share are in ``resourceslice._names``.
"""

from __future__ import annotations

import re
from typing import Callable

from resourceslice._names import ascii_full, is_driver_name, utf8_len
from resourceslice._pycore import canonical
from resourceslice._pycore.quantity import parse_quantity
from resourceslice._pycore.validate import (
    DUPLICATE,
    REQUIRED,
    Errors,
    Node,
    check_bool,
    check_int,
    check_list,
    check_max,
    check_str,
)

MAX_VALUE_LENGTH = 64
MAX_ID_LENGTH = 32
#: Quantities in the rules of a request policy are counted in nano units; the policy's
#: numbers must be below 10^20 (a client-side limit: exact arithmetic in 128 bits).
NANO = 10**9
POLICY_LIMIT = 10**20 * NANO

BAD_DOMAIN = "the domain must be a DNS subdomain of at most 63 characters"
BAD_ID = "the name must be a C identifier of at most 32 characters"
BAD_VERSION = "must be a semantic version (semver 2.0.0)"


def invalid_quantity(text: str) -> str:
    return f"invalid quantity {canonical.quote(text)}"


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


_HUGEPAGES = "hugepages-"


def is_allocatable(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith(_HUGEPAGES)
