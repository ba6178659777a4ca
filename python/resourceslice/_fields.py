"""The API's ResourceSlice fields: ``_fields.txt``, the table both cores read (its head says
what each column means). The header's optional fields, their order, decoding, the feature
gates of dropped fields and the public ``Slice``'s conversion come from it."""

from __future__ import annotations

from importlib.resources import files
from typing import NamedTuple


class Field(NamedTuple):
    #: The JSON name.
    name: str
    #: The struct it is a member of: ``spec``, ``device``, ``device.<member>``.
    at: str
    #: Its feature gates, as the API's ``+featureGate`` tag lists them.
    gates: tuple[str, ...]
    #: Its JSON type as the API has it (string, bool, int, list, map, object).
    json: str
    #: A carried slice field's checker (``_pycore/validate/slice.py``); ``-`` for fields
    #: handled by name.
    check: str

    @property
    def attribute(self) -> str:
        """Its name as an attribute of ``api.Slice`` (snake_case)."""
        return "".join(f"_{c.lower()}" if c.isupper() else c for c in self.name)


def _read() -> tuple[Field, ...]:
    rows = []
    for line in files(__package__).joinpath("_fields.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, at, gates, json, check = line.split()
        rows.append(Field(name, at, () if gates == "-" else tuple(gates.split(",")), json, check))
    return tuple(rows)


#: Every row, in the table's order.
FIELDS = _read()
#: The optional slice fields the core carries as values, in the header's order: a
#: ``SliceSpec``'s and a header's ``carried`` are indexed like this.
CARRIED = tuple(f for f in FIELDS if f.at == "spec" and f.check != "-")
_UNGATED = frozenset(f.name for f in FIELDS if not f.gates)
#: The gate a dropped member needs, by its name alone: every gated field but those whose name
#: another field has without a gate (a device's own node selection: ``DEVICE_GATES``). The
#: first row of a name counts, as in fields.rs.
GATES = {f.name: f.gates[0] for f in reversed(FIELDS) if f.gates and f.name not in _UNGATED}
#: The gates of a device's members that ``GATES`` leaves out (nodeName...).
DEVICE_GATES = {f.name: f.gates[0] for f in FIELDS if f.at == "device" and f.gates}
