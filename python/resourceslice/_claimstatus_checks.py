"""The apiserver's rules for one ``status.devices`` entry of a ResourceClaim, checked here.

:func:`device_status_problems` gives every problem of an entry with its path, as the
apiserver's validation (``k8s.io/kubernetes`` ``pkg/apis/resource/validation``) would; the
claim status writer (:mod:`resourceslice.claimstatus`) sends nothing while there is one.
``data``'s size is counted as the apiserver stores it (:func:`data_size`), which differs from
Python's own JSON. ``tests/vectors/claimstatus.json`` holds Kubernetes' verdicts these rules
agree with.
"""

from __future__ import annotations

import decimal
import ipaddress
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from resourceslice._names import is_dns_label, is_driver_name, is_label_name, is_pool_name

_INT64 = 2**63

#: The API's limits of one ``status.devices`` entry (``k8s.io/api/resource/v1``).
MAX_CONDITIONS = 8
MAX_DATA_BYTES = 10 * 1024
MAX_INTERFACE_NAME_BYTES = 256
MAX_HARDWARE_ADDRESS_BYTES = 128
MAX_IPS = 16
#: ``metav1.Condition``'s limits (apimachinery's ValidateCondition).
MAX_REASON_BYTES = 1024
MAX_MESSAGE_BYTES = 32 * 1024
#: The apiserver's limit on a field manager's name.
MAX_FIELD_MANAGER = 128
#: This library's limit on the nesting of ``data`` (the apiserver's is deeper): the claim
#: that comes back is decoded by Python's json, which recurses.
MAX_DATA_DEPTH = 64


# -- the checks ------------------------------------------------------------------------------

_CONDITION_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CONDITION_STATUSES = ("True", "False", "Unknown")
_ENTRY_FIELDS = ("driver", "pool", "device", "shareID", "conditions", "data", "networkData")
_CONDITION_FIELDS = (
    "type",
    "status",
    "observedGeneration",
    "lastTransitionTime",
    "reason",
    "message",
)
_NETWORK_FIELDS = ("interfaceName", "ips", "hardwareAddress")


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _unicode(text: str) -> bool:
    """Whether ``text`` can be sent: no lone surrogates (they have no UTF-8 form)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _days_in(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (year 0 included)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


#: The zero ``metav1.Time`` (Go's zero time.Time) in seconds since 1970: "not set".
_ZERO_TIME = _days_from_civil(1, 1, 1) * 86400


def _parse_time(text: str) -> tuple[int, int] | None:
    """``text`` as Go's ``time.Parse(time.RFC3339, text)`` reads it (metav1.Time does):
    ``(seconds since 1970 in UTC, nanoseconds)``, or None when Go refuses it.

    Go's parser is more lenient than RFC 3339: a one-digit hour, a comma before the
    fraction, any number of fraction digits, offsets up to ``+24:00`` / ``:60``.
    """

    def num(at: int, fixed: bool) -> tuple[int, int] | None:
        if at >= len(text) or not ("0" <= text[at] <= "9"):
            return None
        if at + 1 >= len(text) or not ("0" <= text[at + 1] <= "9"):
            return None if fixed else (int(text[at]), at + 1)
        return int(text[at : at + 2]), at + 2

    if not text.isascii() or len(text) < 4 or not text[:4].isdigit():
        return None
    year, at = int(text[:4]), 4
    fields = []
    for sep, fixed, limit in (("-", True, 13), ("-", True, 32), ("T", False, 24), (":", True, 60)):
        if text[at : at + 1] != sep:
            return None
        got = num(at + 1, fixed)
        if got is None or got[0] >= limit:
            return None
        fields.append(got[0])
        at = got[1]
    month, day, hour, minute = fields
    if text[at : at + 1] != ":":
        return None
    got = num(at + 1, True)
    if got is None or got[0] >= 60:
        return None
    second, at = got
    nanos = 0
    if at + 1 < len(text) and text[at] in ".," and text[at + 1].isdigit():
        end = at + 1
        while end < len(text) and text[end].isdigit():
            end += 1
        digits = text[at + 1 : end][:9]
        nanos = int(digits.ljust(9, "0"))
        at = end
    offset = 0
    if text[at : at + 1] == "Z":
        at += 1
    else:
        zone = text[at : at + 6]
        if len(zone) < 6 or zone[0] not in "+-" or zone[3] != ":":
            return None
        hh, mm = zone[1:3], zone[4:6]
        if not (hh.isdigit() and mm.isdigit()) or int(hh) > 24 or int(mm) > 60:
            return None
        offset = (int(hh) * 60 + int(mm)) * 60 * (1 if zone[0] == "+" else -1)
        at += 6
    if at != len(text) or month < 1 or not 1 <= day <= _days_in(year, month):
        return None
    days = _days_from_civil(year, month, day)
    return days * 86400 + hour * 3600 + minute * 60 + second - offset, nanos


# The apiserver's encoding of data: encoding/json's, after the apply patch's YAML decoding.

_GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _go_string(text: str) -> str:
    encoded = json.dumps(text, ensure_ascii=False)
    if not any(c in _GO_ESCAPES for c in text):
        return encoded
    return "".join(_GO_ESCAPES.get(c, c) for c in encoded)


def _go_float(value: float) -> str:
    """A float64 as encoding/json writes it: the shortest digits that read back (as
    ``repr``), in ES6 style: ``0.000001``, ``1e-7``, ``100``, ``1e+21``."""
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, digit_tuple, exponent = decimal.Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)
    point = len(digits) + exponent  # digits before the decimal point
    minus = "-" if sign else ""
    if 1e-6 <= abs(value) < 1e21:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return minus + digits + "0" * (point - len(digits))
        return f"{minus}{digits[:point]}.{digits[point:]}"
    mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    power = point - 1
    # strconv writes at least two exponent digits, encoding/json drops a leading 0 of a
    # negative one (1e-07 is 1e-7); below 1e-6 and from 1e21 on, no other case arises.
    return f"{minus}{mantissa}e-{-power}" if power < 0 else f"{minus}{mantissa}e+{power:02d}"


class _NotJSON(Exception):
    """A data value the apiserver cannot receive: where it is and why."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _go_number(value: float, path: str) -> str:
    """A number as the apiserver stores it: the apply patch's YAML reads an integer of 64
    bits as one and any other number as a float64, which encoding/json writes; that text is
    read once more, as an integer when it is one (so ``-0.0`` is ``0``)."""
    if isinstance(value, int):
        if -_INT64 <= value < _INT64:
            return str(value)
        try:
            value = float(value)
        except OverflowError:
            raise _NotJSON(path, "is too large for a JSON number") from None
    if not math.isfinite(value):
        raise _NotJSON(path, "must be a finite number")
    text = _go_float(value)
    return "0" if text == "-0" else text


def _go_chunks(value: Any, path: str) -> Iterator[str]:
    """The encoding of ``value`` as the apiserver stores it, in pieces; without recursion,
    as data may nest as deep as its 10 KiB allow. Raises _NotJSON."""
    # Each item: ("text", piece) to write, or ("value", value, path) to encode.
    stack: list[tuple[str, Any, str]] = [("value", value, path)]
    while stack:
        kind, item, where = stack.pop()
        if kind == "text":
            yield item
        elif item is None:
            yield "null"
        elif item is True or item is False:
            yield "true" if item else "false"
        elif isinstance(item, (int, float)):
            yield _go_number(item, where)
        elif isinstance(item, str):
            if not _unicode(item):
                raise _NotJSON(where, "must be valid Unicode (no lone surrogates)")
            yield _go_string(item)
        elif isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    raise _NotJSON(where, f"keys must be strings, not {type(key).__name__}")
                if not _unicode(key):
                    raise _NotJSON(where, "keys must be valid Unicode (no lone surrogates)")
            pending: list[tuple[str, Any, str]] = [("text", "{", "")]
            for i, key in enumerate(sorted(item)):  # code point order is UTF-8 byte order
                pending.append(("text", f"{',' if i else ''}{_go_string(key)}:", ""))
                pending.append(("value", item[key], f"{where}[{json.dumps(key)}]"))
            pending.append(("text", "}", ""))
            stack.extend(reversed(pending))
        elif isinstance(item, (list, tuple)):
            pending = [("text", "[", "")]
            for i, element in enumerate(item):
                if i:
                    pending.append(("text", ",", ""))
                pending.append(("value", element, f"{where}[{i}]"))
            pending.append(("text", "]", ""))
            stack.extend(reversed(pending))
        else:
            raise _NotJSON(where, f"must be JSON data, not {type(item).__name__}")


def data_size(data: Any) -> int:
    """The bytes of ``data`` as the apiserver stores and limits it: encoding/json's form
    (keys sorted, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped, numbers as float64 unless
    they are integers of 64 bits, as ``1e-7``, ``1e+21``) of the apply patch's values.

    ValueError when ``data`` is not JSON data.
    """
    try:
        return sum(_bytes(chunk) for chunk in _go_chunks(data, "data"))
    except _NotJSON as exc:
        raise ValueError(str(exc)) from None


def _check_string(problems: list[str], path: str, value: Any) -> str | None:
    if not isinstance(value, str):
        problems.append(f"{path}: must be a string")
        return None
    if not _unicode(value):
        problems.append(f"{path}: must be valid Unicode (no lone surrogates)")
        return None
    return value


def _check_mapping(
    problems: list[str], path: str, value: Any, known: Sequence[str]
) -> Mapping[str, Any] | None:
    if not isinstance(value, Mapping):
        problems.append(f"{path}: must be an object")
        return None
    for key in value:
        if key not in known:
            problems.append(f"{path}: unknown field {key!r}")
    return value


def _check_condition(problems: list[str], path: str, condition: Any, seen: set[str]) -> None:
    fields = _check_mapping(problems, path, condition, _CONDITION_FIELDS)
    if fields is None:
        return
    kind = fields.get("type")
    if kind is None or kind == "":
        problems.append(f"{path}.type: is required")
    elif (text := _check_string(problems, f"{path}.type", kind)) and not is_label_name(text):
        problems.append(f"{path}.type: must be a qualified name ([<DNS subdomain>/]<name>)")
    if kind is None or isinstance(kind, str):  # absent is "", as Go reads it
        if (kind or "") in seen:
            problems.append(f"{path}: duplicate type {kind or ''!r}")
        seen.add(kind or "")
    status = fields.get("status")
    if status is None or status == "":
        problems.append(f"{path}.status: is required")
    elif _check_string(problems, f"{path}.status", status) and status not in _CONDITION_STATUSES:
        problems.append(f"{path}.status: must be one of True, False, Unknown")
    generation = fields.get("observedGeneration")
    if generation is not None:
        if isinstance(generation, bool) or not isinstance(generation, int):
            problems.append(f"{path}.observedGeneration: must be an integer")
        elif not 0 <= generation < _INT64:
            problems.append(f"{path}.observedGeneration: must be from 0 to 2^63-1")
    when = fields.get("lastTransitionTime")
    if when is None:
        problems.append(f"{path}.lastTransitionTime: is required")
    elif (text := _check_string(problems, f"{path}.lastTransitionTime", when)) is not None:
        parsed = _parse_time(text)
        if parsed is None:
            problems.append(f"{path}.lastTransitionTime: must be an RFC 3339 time")
        elif parsed == (_ZERO_TIME, 0):
            problems.append(f"{path}.lastTransitionTime: is required (the zero time is unset)")
    reason = fields.get("reason")
    if reason is None or reason == "":
        problems.append(f"{path}.reason: is required")
    elif (text := _check_string(problems, f"{path}.reason", reason)) is not None:
        if not (text.isascii() and _CONDITION_REASON.fullmatch(text)):
            problems.append(
                f"{path}.reason: must start with a letter, then letters, digits or _,: and "
                "end with a letter, digit or _"
            )
        if _bytes(text) > MAX_REASON_BYTES:
            problems.append(f"{path}.reason: must be at most {MAX_REASON_BYTES} bytes")
    message = fields.get("message")
    if (
        message is not None
        and (text := _check_string(problems, f"{path}.message", message))
        and _bytes(text) > MAX_MESSAGE_BYTES
    ):
        problems.append(f"{path}.message: must be at most {MAX_MESSAGE_BYTES} bytes")


def _canonical_ip(text: str) -> str | None:
    """The canonical ``<address>/<prefix length>`` of ``text``, or None when it is not an
    address with a prefix length (Go's ParseCIDR, which knows no zones)."""
    address, slash, length = text.partition("/")
    if not slash or not length.isdigit() or not length.isascii() or "%" in address:
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        # Go also reads IPv4 octets with leading zeros, whose canonical form differs.
        octets = address.split(".")
        if len(octets) != 4 or not all(o.isascii() and o.isdigit() for o in octets):
            return None
        if any(int(o) > 255 for o in octets):
            return None
        ip = ipaddress.IPv4Address(".".join(str(int(o)) for o in octets))
    bits = int(length)
    if bits > ip.max_prefixlen:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        # Go treats an IPv4-mapped address as IPv4: ::ffff:10.9.8.7/120 is 10.9.8.7/24.
        return f"{ip.ipv4_mapped}/{bits - 96}" if bits >= 96 else f"{ip.ipv4_mapped}/{bits}"
    return f"{ip.compressed}/{bits}"


def _check_network(problems: list[str], path: str, value: Any) -> None:
    fields = _check_mapping(problems, path, value, _NETWORK_FIELDS)
    if fields is None:
        return
    for key, limit in (
        ("interfaceName", MAX_INTERFACE_NAME_BYTES),
        ("hardwareAddress", MAX_HARDWARE_ADDRESS_BYTES),
    ):
        text = _check_string(problems, f"{path}.{key}", fields[key]) if key in fields else None
        if text and _bytes(text) > limit:
            problems.append(f"{path}.{key}: must be at most {limit} bytes")
    ips = fields.get("ips")
    if ips is None:
        return
    if isinstance(ips, str) or not isinstance(ips, Sequence):
        problems.append(f"{path}.ips: must be a list")
        return
    if len(ips) > MAX_IPS:
        problems.append(f"{path}.ips: must have at most {MAX_IPS} items, not {len(ips)}")
        return
    seen: set[str] = set()
    for i, ip in enumerate(ips):
        text = _check_string(problems, f"{path}.ips[{i}]", ip)
        if text is None:
            continue
        canonical = _canonical_ip(text)
        if canonical is None:
            problems.append(
                f"{path}.ips[{i}]: must be an address with its prefix length "
                "(10.9.8.7/24, 2001:db8::7/64)"
            )
        elif canonical != text:
            problems.append(f"{path}.ips[{i}]: must be in canonical form ({canonical!r})")
        if text in seen:
            problems.append(f"{path}.ips[{i}]: duplicate {text!r}")
        seen.add(text)


def device_status_problems(entry: Mapping[str, Any]) -> list[str]:
    """What the apiserver would refuse in ``entry`` (one ``status.devices`` item), each as
    ``<path>: <problem>`` with the path relative to the entry; empty when it is valid.

    Whether the claim has the device allocated is the claim's state, not the entry's: the
    apiserver checks it.
    """
    problems: list[str] = []
    for key in entry:
        if key not in _ENTRY_FIELDS:
            problems.append(f"unknown field {key!r}")
    driver = _check_string(problems, "driver", entry.get("driver"))
    if driver is not None and not is_driver_name(driver):
        problems.append("driver: must be a DNS subdomain of at most 63 characters")
    pool = _check_string(problems, "pool", entry.get("pool"))
    if pool is not None and not is_pool_name(pool):
        problems.append("pool: must be DNS subdomains separated by /, at most 253 characters")
    device = _check_string(problems, "device", entry.get("device"))
    if device is not None and not is_dns_label(device):
        problems.append("device: must be a DNS label")
    if entry.get("shareID") is not None:
        share_id = _check_string(problems, "shareID", entry["shareID"])
        if share_id is not None and not _UUID.fullmatch(share_id):
            problems.append("shareID: must be a lower-case UUID (8-4-4-4-12 hex digits)")
    conditions = entry.get("conditions")
    if conditions is not None:
        if isinstance(conditions, (str, Mapping)) or not isinstance(conditions, Sequence):
            problems.append("conditions: must be a list")
        elif len(conditions) > MAX_CONDITIONS:
            problems.append(
                f"conditions: must have at most {MAX_CONDITIONS} items, not {len(conditions)}"
            )
            # Each is still checked, as the apiserver does.
        if isinstance(conditions, Sequence) and not isinstance(conditions, (str, Mapping)):
            seen: set[str] = set()
            for i, condition in enumerate(conditions):
                _check_condition(problems, f"conditions[{i}]", condition, seen)
    if "data" in entry and entry["data"] is not None:
        data = entry["data"]
        if not isinstance(data, Mapping):
            problems.append("data: must be a JSON object")
        else:
            try:
                size = sum(_bytes(c) for c in _go_chunks(data, "data"))
            except _NotJSON as exc:
                problems.append(f"{exc.path}: {exc.problem}")
            else:
                if size > MAX_DATA_BYTES:
                    problems.append(
                        f"data: must be at most {MAX_DATA_BYTES} bytes as JSON, not {size}"
                    )
    if entry.get("networkData") is not None:
        _check_network(problems, "networkData", entry["networkData"])
    return problems
