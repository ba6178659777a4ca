"""The public data types: what a driver describes, and the errors it can get back.

Devices, node selectors and counters are accepted as plain dicts in the REST JSON shape
(camelCase; typed as :mod:`resourceslice.types`) or as the ``kubernetes`` client's model
objects; :mod:`resourceslice._plain` turns either into the plain mapping the core validates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from resourceslice.types import CounterSet, Device, KubernetesModel, NodeOperation, NodeSelector

__all__ = [
    "ConflictingWriterError",
    "DriverResources",
    "DroppedFieldsError",
    "Owner",
    "Pool",
    "RequestDeadlineError",
    "ResourceSliceError",
    "Slice",
    "Stats",
    "ValidationError",
]


@dataclass(frozen=True)
class Owner:
    """The object that owns the slices (``ownerReferences``).

    A ``v1`` ``Node`` owner also pins the slices to that node (``spec.nodeName``); an empty
    ``uid`` is looked up from the apiserver once.
    """

    api_version: str
    kind: str
    name: str
    uid: str = ""

    @property
    def is_node(self) -> bool:
        return self.api_version == "v1" and self.kind == "Node"


@dataclass
class Slice:
    """One explicitly laid out ResourceSlice of a pool, published as given.

    ``partition_type_attribute`` (``spec.partitionTypeAttribute``) names the string
    attribute, ``<domain>/<name>``, that gives each counter-consuming device of the slice its
    partition type; ``skip_node_operations`` (``spec.skipNodeOperations``) lists node
    operations the kubelet may skip for its devices (``NodePrepareResources``,
    ``NodeUnprepareResources``, ``*``). Both are alpha in Kubernetes 1.37.
    """

    devices: Sequence[Device | KubernetesModel] = ()
    shared_counters: Sequence[CounterSet | KubernetesModel] | None = None
    per_device_node_selection: bool | None = None
    partition_type_attribute: str | None = None
    skip_node_operations: Sequence[NodeOperation] | None = None


@dataclass
class Pool:
    """A pool: either a flat ``devices`` list (packed into slices) or explicit ``slices``.

    Where its devices are is said explicitly, one way per slice: a Node owner (the
    controller's), ``node_selector``, ``all_nodes=True``, or ``per_device_node_selection`` in
    its slices. There is no default: a pool without any is a ``ValidationError``.

    ``max_devices_per_slice`` (1 to 128; a flat pool only): pack fewer devices per slice than
    the API allows. A driver that taints devices later (health) sets 64, the API's limit for
    a slice holding a tainted device: a taint is then an update of one slice, where a full
    slice of 128 must give up half its devices to other slices, which rewrites the whole
    pool under a new generation (docs/core.md §4)."""

    devices: Sequence[Device | KubernetesModel] | None = None
    slices: Sequence[Slice] | None = None
    node_selector: NodeSelector | KubernetesModel | None = None
    all_nodes: bool = False
    generation: int = 0
    max_devices_per_slice: int | None = None


@dataclass
class DriverResources:
    """Everything the driver wants published, by pool name."""

    pools: Mapping[str, Pool] = field(default_factory=dict)


@dataclass(frozen=True)
class Stats:
    """Successful write calls made by a controller since it started, and pool syncs done."""

    creates: int = 0
    updates: int = 0
    deletes: int = 0
    syncs: int = 0


class ResourceSliceError(Exception):
    """The base of the errors this library raises or reports: ``except
    resourceslice.ResourceSliceError`` catches each of them (each keeps its own base too:
    :class:`ValidationError` is a ``ValueError``). Errors of the cluster come as
    :class:`~resourceslice.connection.ApiError`, those of the network as urllib3 raises them."""


class _PickledByFields:
    """Pickled with the arguments of its constructor, the attributes named in ``_fields``.

    An exception pickles its ``args``, here the message, which these constructors do not
    take: unpickling would fail, or build a wrong object.
    """

    _fields: tuple[str, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), tuple(getattr(self, name) for name in self._fields), self.__dict__)


class ValidationError(_PickledByFields, ValueError, ResourceSliceError):
    """Input the apiserver would refuse (the desired resources, a claim's device status);
    ``errors`` lists every problem with its path, ``summary`` says what was checked."""

    _fields = ("errors", "summary")

    def __init__(self, errors: Sequence[str], summary: str = "invalid driver resources") -> None:
        self.errors: list[str] = list(errors)
        self.summary = summary
        super().__init__(f"{summary}:\n  " + "\n  ".join(self.errors))


class DroppedFieldsError(_PickledByFields, ResourceSliceError):
    """The apiserver stored a slice without some fields the controller sent.

    Usually a feature gate that is off in the cluster (device taints, partitionable devices,
    binding conditions…). ``paths`` names what was sent and not stored
    (``spec.devices[0].bindingConditions``), ``features`` the gates that are probably off for
    it (as Go's ``DisabledFeatures()``; empty when no known field explains it), and
    ``slice_index`` the slice's index in its pool. What the server or a webhook added (a
    label, an annotation, a default) is not a drop. The controller does not rewrite the
    slice again for the same desired state: the stored one is what this cluster can hold.
    """

    _fields = ("pool", "slice_name", "slice_index", "paths", "features")

    def __init__(
        self,
        pool: str,
        slice_name: str,
        slice_index: int = 0,
        paths: Sequence[str] = (),
        features: Sequence[str] = (),
    ) -> None:
        self.pool = pool
        self.slice_name = slice_name
        self.slice_index = slice_index
        self.paths = list(paths)
        self.features = list(features)
        super().__init__(
            f"pool {pool!r}, slice #{slice_index} ({slice_name!r}): the apiserver dropped "
            f"{', '.join(self.paths) or 'some fields'}, probably because these features are "
            f"disabled: {' '.join(self.features) or 'unknown'}"
        )


class ConflictingWriterError(_PickledByFields, ResourceSliceError):
    """Someone else changed a slice this controller wrote; it is being put back.

    Reported (not raised) through the error handler each time the controller overwrites
    another writer's change. Repeated reports for one pool mean a fight: usually a second
    controller for the same driver and node with a different desired state.
    """

    _fields = ("pool", "slice_name")

    def __init__(self, pool: str, slice_name: str) -> None:
        self.pool = pool
        self.slice_name = slice_name
        super().__init__(
            f"pool {pool!r}, slice {slice_name!r}: changed by another writer since this "
            "controller wrote it; restoring the desired state"
        )


class RequestDeadlineError(TimeoutError, ResourceSliceError):
    """A request was not sent: its deadline (a leader's write budget, a Lease attempt's, a
    kubelet call's) passed before it could be, e.g. while a kubeconfig exec plugin refreshed
    the token. Nothing of it reached the server."""


class SliceExistsError(_PickledByFields, ResourceSliceError):
    """Slices this controller was creating exist already: someone else created them.

    Slice names are derived from driver, owner, pool and index, so this is another
    controller publishing the same pool (a driver running twice), or a create of this one
    whose response was lost. The pool is synced again once the watch has the slices; with
    the same desired state nothing more is written.
    """

    _fields = ("pool", "slice_names")

    def __init__(self, pool: str, slice_names: Sequence[str]) -> None:
        self.pool = pool
        self.slice_names = list(slice_names)
        super().__init__(
            f"pool {pool!r}: {len(self.slice_names)} slice(s) already exist, created by "
            f"another writer: {', '.join(self.slice_names)}"
        )
