"""Raw JSON bytes from the apiserver -> ``SliceRecord`` (docs/core.md §6).

Each device is canonicalised once, here, so that planning compares strings.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from resourceslice._fields import CARRIED
from resourceslice._pycore import canonical

_ABSENT = object()


class SliceRecord:
    """What the store keeps of one ResourceSlice."""

    __slots__ = (
        "annotations",
        "deleting",
        "device_jsons",
        "device_names",
        "driver",
        "finalizers",
        "generation",
        "header",
        "labels",
        "name",
        "node_name",
        "owner_references",
        "pool",
        "resource_slice_count",
        "resource_version",
        "uid",
    )

    def __init__(
        self,
        name: str,
        uid: str,
        resource_version: str,
        driver: str,
        pool: str,
        generation: int,
        resource_slice_count: int,
        node_name: str | None,
        device_names: list[str],
        device_jsons: list[str],
        header: str,
        labels: Any,
        annotations: Any,
        owner_references: Any,
        finalizers: Any,
        deleting: bool,
    ) -> None:
        self.name = name
        self.uid = uid
        self.resource_version = resource_version
        self.driver = driver
        self.pool = pool
        self.generation = generation
        self.resource_slice_count = resource_slice_count
        self.node_name = node_name
        self.device_names = device_names
        #: Canonical JSON of each device, in stored order.
        self.device_jsons = device_jsons
        #: Canonical JSON of the header (docs/core.md §1).
        self.header = header
        #: Metadata of other clients, stored as it is: an update keeps it (upstream replaces
        #: only the spec).
        self.labels = labels
        self.annotations = annotations
        self.owner_references = owner_references
        self.finalizers = finalizers
        #: ``metadata.deletionTimestamp`` is set: the slice is going away (a finalizer
        #: holds it), and is not written again.
        self.deleting = deleting

    def same_content(self, other: SliceRecord) -> bool:
        """Semantic equality of header and devices, ``self`` taken as the desired side."""
        return (
            canonical.header_eq(self.header, other.header)
            and len(self.device_jsons) == len(other.device_jsons)
            and all(map(canonical.device_eq, self.device_jsons, other.device_jsons))
        )

    def dropped_fields(self, stored: SliceRecord) -> tuple[list[str], list[str]]:
        """``(paths, features)``: what ``self`` (as sent) has and ``stored`` has not, and the
        feature gates probably off for it; ``([], [])`` when all of it was stored."""
        return canonical.dropped_fields(
            self.header, self.device_jsons, stored.header, stored.device_jsons
        )

    def __repr__(self) -> str:
        return f"SliceRecord(name={self.name!r}, pool={self.pool!r}, generation={self.generation})"


def _parse(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a JSON document: {exc}") from None


def _int(pool: dict[str, Any], key: str, name: str) -> int:
    value = pool.get(key)
    if value is None and key not in pool:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"{name}: spec.pool.{key} is not an integer")
    return value


def _str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) else None


def record(obj: Any) -> SliceRecord:
    """One ResourceSlice object (its ``kind`` may be absent, as in list items)."""
    if not isinstance(obj, dict):
        raise ValueError("a ResourceSlice must be a JSON object")
    if "kind" in obj and obj["kind"] != "ResourceSlice":
        raise ValueError(f"expected kind ResourceSlice, got {canonical.to_json(obj['kind'])}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ValueError("missing metadata")
    name = _str(meta, "name")
    if not name:
        raise ValueError("missing metadata.name")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise ValueError(f"{name}: missing spec")
    pool = spec.get("pool")
    if not isinstance(pool, dict):
        raise ValueError(f"{name}: missing spec.pool")
    pool_name = _str(pool, "name")
    if pool_name is None:
        raise ValueError(f"{name}: missing spec.pool.name")
    generation = _int(pool, "generation", name)
    count = _int(pool, "resourceSliceCount", name)
    driver = _str(spec, "driver") or ""
    node_selection = next(((k, spec[k]) for k in canonical.NODE_SELECTION_KEYS if k in spec), None)
    device_names: list[str] = []
    device_jsons: list[str] = []
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else ():
        stored = canonical.stored_device(device)
        if stored is not None:
            device_names.append(stored[0])
            # Shared with the desired state's equal text, as the Rust core shares it.
            device_jsons.append(sys.intern(stored[1]))
    header = canonical.header(
        driver,
        pool_name,
        generation,
        count,
        node_selection,
        spec.get("sharedCounters"),
        meta.get("ownerReferences"),
        [spec.get(f.name) for f in CARRIED],
    )
    return SliceRecord(
        name=name,
        uid=_str(meta, "uid") or "",
        resource_version=_str(meta, "resourceVersion") or "",
        driver=driver,
        pool=pool_name,
        generation=generation,
        resource_slice_count=count,
        node_name=_str(spec, "nodeName"),
        device_names=device_names,
        device_jsons=device_jsons,
        header=canonical.stored_header(header),
        labels=canonical.prune(meta.get("labels")),
        annotations=canonical.prune(meta.get("annotations")),
        owner_references=meta.get("ownerReferences"),
        finalizers=meta.get("finalizers"),
        deleting=meta.get("deletionTimestamp") is not None,
    )


def decode_slice(data: bytes) -> SliceRecord:
    return record(_parse(data))


class _Reader:
    """One JSON document read value by value with the ``json`` module's own decoder, so that a
    list's items can become records one at a time: the dicts of a whole list take about 13
    times its JSON. What it accepts and rejects is what ``json.loads`` does."""

    _WHITESPACE = re.compile(r"[ \t\n\r]*")
    _DECODER = json.JSONDecoder()

    def __init__(self, data: bytes) -> None:
        try:
            self.text = data.decode(json.detect_encoding(data), "surrogatepass")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not a JSON document: {exc}") from None
        self.pos = 0

    def _fail(self, message: str) -> ValueError:
        return ValueError(
            f"not a JSON document: {json.JSONDecodeError(message, self.text, self.pos)}"
        )

    def peek(self) -> str:
        """The next character after whitespace ("" at the end)."""
        match = self._WHITESPACE.match(self.text, self.pos)
        assert match is not None  # the pattern matches the empty string
        self.pos = match.end()
        return self.text[self.pos : self.pos + 1]

    def value(self) -> Any:
        self.peek()
        try:
            value, self.pos = self._DECODER.raw_decode(self.text, self.pos)
        except ValueError as exc:
            raise ValueError(f"not a JSON document: {exc}") from None
        return value

    def _close(self, close: str) -> bool:
        """After a member or element: whether ``close`` ends the container (else a comma)."""
        char = self.peek()
        if char not in (",", close):
            raise self._fail("Expecting ',' delimiter")
        self.pos += 1
        return char == close

    def members(self) -> Iterator[str]:
        """The keys of the object that starts here; the caller reads each value."""
        self.pos += 1  # the caller peeked "{"
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            if self.peek() != '"':
                raise self._fail("Expecting property name enclosed in double quotes")
            key: str = self.value()
            if self.peek() != ":":
                raise self._fail("Expecting ':' delimiter")
            self.pos += 1
            yield key
            if self._close("}"):
                return

    def elements(self) -> Iterator[Any]:
        """The elements of the array that starts here, each parsed when it is asked for."""
        self.pos += 1  # the caller peeked "["
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield self.value()
            if self._close("]"):
                return

    def end(self) -> None:
        if self.peek():
            raise self._fail("Extra data")


def decode_list(data: bytes) -> tuple[str, list[SliceRecord]]:
    """``(list resourceVersion, records)``.

    Items become records one at a time (see ``_Reader``). Problems come in the order a parse of
    the whole document finds them: a syntax error anywhere, a list that is not an object, its
    ``kind``, then its items; of a repeated member the last counts, as in ``json.loads``.
    """
    reader = _Reader(data)
    if reader.peek() != "{":
        reader.value()
        reader.end()
        raise ValueError("a ResourceSliceList must be a JSON object")
    kind: Any = _ABSENT
    version = ""
    records: list[SliceRecord] = []
    problem: ValueError | None = None
    for key in reader.members():
        if key == "items":
            records, problem = [], None
            if reader.peek() != "[":
                if reader.value() is not None:
                    problem = ValueError("items is not a list")
                continue
            for item in reader.elements():
                if problem is None:
                    try:
                        records.append(record(item))
                    except ValueError as exc:
                        problem = exc
        elif key == "kind":
            kind = reader.value()
        elif key == "metadata":
            meta = reader.value()
            version = (_str(meta, "resourceVersion") if isinstance(meta, dict) else None) or ""
        else:
            reader.value()
    reader.end()
    if kind is not _ABSENT and kind != "ResourceSliceList":
        raise ValueError(f"expected kind ResourceSliceList, got {canonical.to_json(kind)}")
    if problem is not None:
        raise problem
    return version, records


def decode_list_chunks(chunks: Iterable[bytes]) -> tuple[str, list[SliceRecord]]:
    """``decode_list`` of the chunks joined (the Rust core decodes them as they come)."""
    return decode_list(b"".join(chunks))


def decode_watch_event(data: bytes) -> tuple[str, SliceRecord | None, str]:
    """``(type, record | None, resourceVersion or the ERROR Status as canonical JSON)``."""
    event = _parse(data)
    if not isinstance(event, dict):
        raise ValueError("a watch event must be a JSON object")
    kind = _str(event, "type")
    if kind is None:
        raise ValueError("watch event without type")
    if "object" not in event:
        raise ValueError("watch event without object")
    obj = event["object"]
    if kind in ("ADDED", "MODIFIED", "DELETED"):
        rec = record(obj)
        return kind, rec, rec.resource_version
    if kind == "BOOKMARK":
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        return kind, None, (_str(meta, "resourceVersion") if isinstance(meta, dict) else None) or ""
    if kind == "ERROR":
        pruned = canonical.prune(obj)
        return kind, None, canonical.to_json(pruned)
    raise ValueError(f"unknown watch event type {canonical.quote(kind)}")
