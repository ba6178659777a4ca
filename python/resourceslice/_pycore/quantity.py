"""Kubernetes quantities, exactly as apimachinery's ``resource.ParseQuantity`` reads them.

``parse_quantity`` returns the string Go's ``Quantity.String()`` prints for the input (the
canonical string sent to the apiserver) and the value key (exact value, for comparisons).
The scanner mirrors Go's step by step, because its quirks are part of the contract: ``"."``
is zero, ``"1.G"`` is accepted, and an input already in a canonical shape (``"+1Ki"``,
``"1.500k"``) is printed back verbatim, as Go caches the input string in that case.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_EXPONENT = re.compile(r"[+-]?[0-9]+")

_DECIMAL_SI = "DecimalSI"
_BINARY_SI = "BinarySI"
_DECIMAL_EXPONENT = "DecimalExponent"

#: suffix -> (base, exponent); "" is decimal.
_SUFFIXES: dict[str, tuple[int, int]] = {
    "n": (10, -9),
    "u": (10, -6),
    "m": (10, -3),
    "": (10, 0),
    "k": (10, 3),
    "M": (10, 6),
    "G": (10, 9),
    "T": (10, 12),
    "P": (10, 15),
    "E": (10, 18),
    "Ki": (2, 10),
    "Mi": (2, 20),
    "Gi": (2, 30),
    "Ti": (2, 40),
    "Pi": (2, 50),
    "Ei": (2, 60),
}
_DECIMAL_SUFFIX_BY_EXPONENT = {e: s for s, (b, e) in _SUFFIXES.items() if b == 10}
_BINARY_SUFFIX_BY_POWER = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]

_INT64_MAX = (1 << 63) - 1
_NANO_SCALE = 9
#: Go reads up to 18 digits into an int64 before falling back to arbitrary precision.
_MAX_INT64_FACTORS = 18
#: Our one limit beyond Go's (docs/core.md §2): it keeps value keys bounded for both cores.
MAX_MANTISSA_BITS = 96


class Quantity(NamedTuple):
    """A parsed quantity: what Go prints for it, and its exact value as a key."""

    canonical: str
    key: str


class _Scanned(NamedTuple):
    positive: bool
    value: str
    num: str
    denom: str
    suffix: str


def _scan(text: str) -> _Scanned | None:
    """Split ``text`` like Go's ``parseQuantityString``; None where Go reports a format error."""
    positive = True
    pos = 0
    end = len(text)
    if text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return _Scanned(positive, "0", "0", "", "")
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return _Scanned(positive, text, num, "", "")
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return _Scanned(positive, text, num, denom, "")
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        return None
    return _Scanned(positive, value, num, denom, text[suffix_start:])


def _interpret(suffix: str) -> tuple[int, int, str] | None:
    """(base, exponent, format) of a suffix, or None when Go does not know it."""
    known = _SUFFIXES.get(suffix)
    if known is not None:
        base, exponent = known
        return base, exponent, _BINARY_SI if base == 2 else _DECIMAL_SI
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT.fullmatch(suffix[1:]):
        exponent = int(suffix[1:])
        if exponent < -(1 << 63) or exponent > _INT64_MAX:
            return None
        # Go narrows the parsed int64 to int32 without a check.
        exponent = (exponent + (1 << 31)) % (1 << 32) - (1 << 31)
        return 10, exponent, _DECIMAL_EXPONENT
    return None


def _fast_path(text: str, s: _Scanned, exponent: int, fmt: str) -> tuple[bool, str | None]:
    """Whether Go's int64 fast path takes ``text``, and the input itself when that path keeps
    it as the printed form (Go skips re-formatting input it judges canonical)."""
    if fmt == _BINARY_SI:
        if s.denom:
            return False, None
        mantissa = 1 << exponent
        # Go: 15 - len(num) - int32(float32(exponent)*3/10) - 1; exact for multiples of 10.
        precision = 15 - len(s.num) - exponent * 3 // 10 - 1
        scale = 0
    else:
        mantissa = 1
        precision = _MAX_INT64_FACTORS - (len(s.num) + len(s.denom))
        scale = exponent
    scale -= len(s.denom)
    if precision < 0 or scale < -_NANO_SCALE:
        return False, None
    shifted = s.num + s.denom
    value = int(shifted)
    if value * mantissa > _INT64_MAX:
        return False, None
    if fmt == _BINARY_SI:
        return True, (text if value & 0x07 != 0 else None)
    # Go's % truncates towards zero; for "is a multiple of 3" that agrees with Python's.
    if scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0":
        return True, text
    return True, None


def _strip_tens(unscaled: int, exponent: int) -> tuple[int, int]:
    """``unscaled * 10**exponent`` with the factors of ten moved into the exponent."""
    if unscaled == 0:
        return 0, 0
    while unscaled % 10 == 0:
        unscaled //= 10
        exponent += 1
    return unscaled, exponent


def _decimal_string(mantissa: int, exponent: int, fmt: str) -> str:
    """Go's decimal printing: the exponent lowered to a multiple of 3."""
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    if fmt == _DECIMAL_EXPONENT:
        return f"{mantissa}" if exponent == 0 else f"{mantissa}e{exponent}"
    # Go prints a DecimalSI value beyond the E suffix without any suffix (1000E -> "1").
    return f"{mantissa}{_DECIMAL_SUFFIX_BY_EXPONENT.get(exponent, '')}"


def _binary_string(unscaled: int, scale: int) -> str:
    """Go's BinarySI printing: decimal below 1024 or for a non-integer, else base 1024."""
    integer, remainder = _integer_part(abs(unscaled), scale)
    if integer < 1024 or remainder:
        return _decimal_string(*_strip_tens(unscaled, -scale), _DECIMAL_SI)
    power = 0
    while integer % 1024 == 0:
        integer //= 1024
        power += 1
    sign = "-" if unscaled < 0 else ""
    return f"{sign}{integer}{_BINARY_SUFFIX_BY_POWER[power]}"


def _integer_part(magnitude: int, scale: int) -> tuple[int, int]:
    """``divmod(magnitude * 10**-scale, 1)`` as integers (remainder in units of 10**-scale)."""
    if scale <= 0:
        return magnitude * 10**-scale, 0
    integer, remainder = divmod(magnitude, 10**scale)
    return integer, remainder


def parse_quantity(text: str) -> Quantity | None:
    """Parse like Go; None when Go refuses ``text`` or its mantissa exceeds 96 bits."""
    if text == "0":
        return Quantity("0", "0")
    if not text:
        return None
    scanned = _scan(text)
    if scanned is None:
        return None
    interpreted = _interpret(scanned.suffix)
    if interpreted is None:
        return None
    base, exponent, fmt = interpreted
    fast, cached = _fast_path(text, scanned, exponent, fmt)
    if not fast and not any(c in _DIGITS for c in scanned.value):
        # Go's arbitrary-precision path reads ``value`` and needs a digit in it.
        return None
    # value = unscaled * 10**-scale, exactly.
    unscaled = int(scanned.num + scanned.denom)
    scale = len(scanned.denom)
    if base == 10:
        scale -= exponent
    else:
        unscaled <<= exponent
    if scale > _NANO_SCALE and unscaled:
        # Round up (away from zero) to nano: some resource, never none. A value below
        # one nano is 1n without computing 10**drop (the exponent may be huge).
        drop = scale - _NANO_SCALE
        if drop >= len(str(unscaled)):
            unscaled = 1
        else:
            quotient, remainder = divmod(unscaled, 10**drop)
            unscaled = quotient + (1 if remainder else 0)
        scale = _NANO_SCALE
    if fmt == _BINARY_SI and _integer_part(unscaled, scale) >= (_INT64_MAX, 0):
        # Go caps binary quantities at the int64 maximum.
        unscaled, scale = _INT64_MAX, 0
    if not scanned.positive:
        unscaled = -unscaled
    mantissa, key_exponent = _strip_tens(unscaled, -scale)
    if abs(mantissa) >= 1 << MAX_MANTISSA_BITS:
        return None
    key = "0" if mantissa == 0 else f"{mantissa}e{key_exponent}"
    if cached is not None:
        return Quantity(cached, key)
    if mantissa == 0:
        return Quantity("0", key)
    if fmt == _BINARY_SI:
        return Quantity(_binary_string(unscaled, scale), key)
    return Quantity(_decimal_string(mantissa, key_exponent, fmt), key)
