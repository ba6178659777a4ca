"""Raw JSON bytes from the apiserver -> ``SliceRecord`` (docs/core.md §6).

Each device is canonicalised once, here, so that planning compares strings.
"""

from __future__ import annotations

import json
from typing import Any

from resourceslice._pycore import canonical


class SliceRecord:
    """What the store keeps of one ResourceSlice."""

    __slots__ = (
        "annotations",
        "device_jsons",
        "device_names",
        "driver",
        "generation",
        "header",
        "labels",
        "name",
        "node_name",
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
        self.labels = labels
        self.annotations = annotations

    def same_content(self, other: SliceRecord) -> bool:
        """Semantic equality of header and devices, ``self`` taken as the desired side."""
        return (
            canonical.header_eq(self.header, other.header)
            and len(self.device_jsons) == len(other.device_jsons)
            and all(map(canonical.device_eq, self.device_jsons, other.device_jsons))
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
            device_jsons.append(stored[1])
    labels, annotations = meta.get("labels"), meta.get("annotations")
    header = canonical.header(
        driver,
        pool_name,
        generation,
        count,
        node_selection,
        spec.get("sharedCounters"),
        meta.get("ownerReferences"),
        labels,
        annotations,
        spec.get("partitionTypeAttribute"),
        spec.get("skipNodeOperations"),
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
        labels=canonical.prune(labels),
        annotations=canonical.prune(annotations),
    )


def decode_slice(data: bytes) -> SliceRecord:
    return record(_parse(data))


def decode_list(data: bytes) -> tuple[str, list[SliceRecord]]:
    """``(list resourceVersion, records)``."""
    obj = _parse(data)
    if not isinstance(obj, dict):
        raise ValueError("a ResourceSliceList must be a JSON object")
    if "kind" in obj and obj["kind"] != "ResourceSliceList":
        raise ValueError(f"expected kind ResourceSliceList, got {canonical.to_json(obj['kind'])}")
    meta = obj.get("metadata")
    version = (_str(meta, "resourceVersion") if isinstance(meta, dict) else None) or ""
    items = obj.get("items")
    if items is None:
        return version, []
    if not isinstance(items, list):
        raise ValueError("items is not a list")
    return version, [record(item) for item in items]


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
