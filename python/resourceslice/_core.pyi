"""The Rust core, ``resourceslice._core``: the whole boundary, typed.

``resourceslice._pycore`` provides the same names with the same behaviour; see docs/core.md.
Data crosses as plain Python data (desired input) and bytes (API objects, request bodies).
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, final, overload

#: ``(api_version, kind, name, uid)`` of the slices' owner.
OwnerRef = tuple[str, str, str, str]

@final
class Desired:
    """A validated, canonical desired state: every pool of one driver. Immutable."""

    @property
    def driver(self) -> str: ...
    def pool_names(self) -> list[str]:
        """The pools, sorted by name."""
    def device_count(self, pool: str) -> int:
        """Devices in ``pool`` (0 for an unknown pool)."""
    def changed_pools(self, new: Desired) -> list[str]:
        """The pools whose desired content differs in ``new`` (or that only one of the two
        has), sorted: after an update, only those need a sync."""
    def with_devices(
        self, pool: str, batch: Desired, removed: Sequence[str]
    ) -> tuple[Desired | None, list[str]]:
        """This state with ``pool``'s devices upserted from ``batch`` (a desired state
        holding only them, in ``pool``) and those named in ``removed`` left out
        (docs/core.md §8); ``(None, errors)`` when ``pool`` is not a desired flat pool."""

@final
class SliceRecord:
    """What the store keeps of one ResourceSlice, decoded from the apiserver's JSON."""

    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def resource_version(self) -> str: ...
    @property
    def driver(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def generation(self) -> int: ...
    @property
    def resource_slice_count(self) -> int: ...
    @property
    def node_name(self) -> str | None: ...
    @property
    def device_names(self) -> list[str]: ...
    @property
    def deleting(self) -> bool:
        """``metadata.deletionTimestamp`` is set: the slice is going away (a finalizer holds
        it); plans neither write nor delete it, and wait for its name to be free."""
    def same_content(self, other: SliceRecord) -> bool:
        """Semantic equality of what the controller owns: the spec and the controller
        reference (not labels, annotations, finalizers, other ownerReferences)."""
    def dropped_fields(self, stored: SliceRecord) -> tuple[list[str], list[str]]:
        """``(paths, features)``, ``self`` taken as what was sent: the paths of what is not in
        ``stored`` as sent (``spec.devices[0].taints``; quantities by value, additions are
        no drop), and the feature gates probably off for them, sorted."""

@final
class Plan:
    """The writes that make one pool's slices equal to the desired state."""

    @property
    def generation(self) -> int: ...
    @property
    def slice_count(self) -> int: ...
    @property
    def device_count(self) -> int: ...
    @property
    def deletes(self) -> list[tuple[str, str, str]]:
        """``(name, uid, resource_version)``: delete with these preconditions."""
    @property
    def writes(self) -> list[str]:
        """Names of every slice to write: the updates, then the creates."""
    @property
    def next_write(self) -> int:
        """Where the next window starts: ``len(writes)`` when this one reached the end."""
    @property
    def updates(self) -> list[tuple[str, bytes]]:
        """``(name, body)``: replace the named slice with ``body`` (JSON). Within the window."""
    @property
    def creates(self) -> list[bytes]:
        """Bodies (JSON) to create, each with its slice name. Within the window."""
    @property
    def waiting(self) -> list[str]:
        """Slices not created because a slice being deleted still holds their name."""
    @property
    def compared(self) -> int:
        """Slices this plan compared with their records; the Rust core carries the others'
        comparison over from the pool's last plan (docs/core.md §5)."""

#: How deep ``non_plain`` looks: deeper input is not plain (the API refuses it).
MAX_PLAIN_DEPTH: int

def non_plain(items: list[Any]) -> list[int]:
    """Positions of the items that are not JSON-shaped data of the exact built-in types
    (dicts with str keys, lists, str, int, float, bool, None) within ``MAX_PLAIN_DEPTH``:
    those must be converted before ``prepare_desired`` reads them."""

@overload
def prepare_desired(
    driver: str,
    pools: Mapping[str, Mapping[str, Any]],
    max_slice_bytes: int,
    plain_only: Literal[False] = False,
) -> tuple[Desired | None, list[str]]: ...
@overload
def prepare_desired(
    driver: str, pools: Mapping[str, Mapping[str, Any]], max_slice_bytes: int, plain_only: bool
) -> tuple[Desired | None, list[str] | None]:
    """Validate and canonicalise; ``(desired, [])`` or ``(None, ["path: problem", ...])``.

    ``plain_only``: the devices come as the caller gave them, not converted; ``(None, None)``
    when ``driver`` or ``pools`` hold anything ``non_plain`` would not call plain (a pool
    counting as depth 0). Then convert and call again: plain devices are read once.

    A pool is ``{"devices" | "slices", "nodeName", "nodeSelector", "allNodes",
    "generation"}`` (``nodeName``: a Node owner's name, or None), a slice ``{"devices",
    "sharedCounters", "perDeviceNodeSelection"}`` and the carried fields of ``_fields.txt``
    by their JSON names; every published slice must end up with exactly one node selection
    (docs/core.md §3)."""

def plan_pool(
    desired: Desired | None,
    pool: str,
    existing: Sequence[SliceRecord],
    owner: OwnerRef | None,
    node_name: str | None,
    first_write: int = 0,
    max_body_bytes: int | None = None,
) -> Plan:
    """Bodies only for the window: ``writes`` from ``first_write`` on, until the bodies
    reach ``max_body_bytes`` (at least one)."""

def decode_slice(data: bytes) -> SliceRecord: ...
def decode_list(data: bytes) -> tuple[str, list[SliceRecord]]: ...
def decode_list_chunks(chunks: Iterable[bytes]) -> tuple[str, list[SliceRecord]]:
    """``decode_list`` of the chunks joined, read as they come: records are made as items
    complete, so the whole JSON and the records are never held together."""

def decode_watch_event(data: bytes) -> tuple[str, SliceRecord | None, str]: ...
def held_texts() -> tuple[int, int]:
    """``(texts, bytes)`` of device text the Rust core holds, each distinct text counted once
    however many desired states and records share it. Rust core only: a diagnostic."""
