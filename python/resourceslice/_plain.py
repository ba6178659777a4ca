"""The public types as the core's plain data: what ``core.prepare_desired`` validates.

Devices, node selectors and counters come as plain dicts in the REST JSON shape or as the
``kubernetes`` client's model objects; the core reads only JSON-shaped values, so each is
turned into one here (and copied: the controller never shares state with the caller).
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from resourceslice._fields import CARRIED
from resourceslice.api import DriverResources, Owner, Pool, Slice

if TYPE_CHECKING:
    from resourceslice import _core as core
    from resourceslice._core import Desired, OwnerRef
    from resourceslice.types import Device, KubernetesModel
else:
    from resourceslice._backend import core

_serializer_lock = threading.Lock()
_serializer: Any = None


def _model_to_plain(obj: Any) -> Any:
    """A ``kubernetes`` model object as its REST JSON (camelCase, unset fields left out)."""
    global _serializer
    with _serializer_lock:
        if _serializer is None:
            from kubernetes.client import ApiClient

            _serializer = ApiClient()
        serializer = _serializer
    return serializer.sanitize_for_serialization(obj)


def _plain(value: Any, path: str, errors: list[str], depth: int = 0) -> Any:
    """Plain JSON-shaped data for ``value``; anything unrepresentable is an error at ``path``.

    Always builds new containers, so the controller never shares state with the caller.
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if depth >= core.MAX_PLAIN_DEPTH:
        errors.append(f"{path}: nested more than {core.MAX_PLAIN_DEPTH} levels deep")
        return None
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} must be a string")
                continue
            out[key] = _plain(item, f"{path}[{key!r}]", errors, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{path}[{i}]", errors, depth + 1) for i, item in enumerate(value)]
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if hasattr(value, "to_dict"):
        return _plain(_model_to_plain(value), path, errors, depth)
    errors.append(f"{path}: unsupported type {type(value).__name__}")
    return None


def _plain_list(
    value: Any, path: str, errors: list[str], *, share_plain: bool = False, convert: bool = True
) -> list[Any] | None:
    """A new list of ``value``'s items as plain data.

    ``share_plain``: items that are plain already are taken as they are, not copied. For
    devices: the core keeps only the canonical JSON it renders from them before update()
    returns, and copying 100,000 device dicts would double the memory update() needs. The
    core tells which items are plain (``non_plain``): walking every device in Python took
    two thirds of update()'s time. ``convert=False`` with it: the items as they are, every
    one (for the core's ``plain_only``, which tells whether any needed converting).
    """
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        errors.append(f"{path}: must be a list")
        return None
    items = list(value)
    if share_plain and not convert:
        return items
    for i in core.non_plain(items) if share_plain else range(len(items)):
        items[i] = _plain(items[i], f"{path}[{i}]", errors)
    return items


def _carried(sl: Slice, path: str, errors: list[str]) -> dict[str, Any]:
    """The slice's carried fields (``_fields.CARRIED``) by JSON name, from its attributes of
    the same names in snake_case: lists as new plain lists, the rest as given (the core checks
    them)."""
    out: dict[str, Any] = {}
    for f in CARRIED:
        value = getattr(sl, f.attribute)
        out[f.name] = _plain_list(value, f"{path}.{f.name}", errors) if f.json == "list" else value
    return out


def to_plain_pools(
    resources: DriverResources, node_name: str | None = None, *, convert_devices: bool = True
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The ``pools`` mapping of ``core.prepare_desired``, and the problems found converting.

    ``node_name``: a Node owner's name, the node selection (``spec.nodeName``) its pools get;
    the core checks that every slice ends up with exactly one, so a pool without any is an
    error, never published on every node by default. Only shape problems are reported here
    (wrong Python types); the core checks content. ``convert_devices=False``: device lists
    hold the caller's items as they are (for ``plain_only``; their problems are not found).
    """
    errors: list[str] = []
    pools: dict[str, dict[str, Any]] = {}
    if not isinstance(resources, DriverResources):
        return {}, [f"resources: must be a DriverResources, not {type(resources).__name__}"]
    for name, pool in resources.pools.items():
        path = f"pools[{name!r}]" if not isinstance(name, str) else f'pools["{name}"]'
        if not isinstance(name, str):
            errors.append(f"{path}: pool name must be a string")
            continue
        if not isinstance(pool, Pool):
            errors.append(f"{path}: must be a Pool, not {type(pool).__name__}")
            continue
        slices: list[dict[str, Any]] | None = None
        if pool.slices is not None:
            slices = []
            for i, sl in enumerate(pool.slices):
                spath = f"{path}.slices[{i}]"
                if not isinstance(sl, Slice):
                    errors.append(f"{spath}: must be a Slice, not {type(sl).__name__}")
                    continue
                slices.append(
                    {
                        "devices": _plain_list(
                            sl.devices,
                            f"{spath}.devices",
                            errors,
                            share_plain=True,
                            convert=convert_devices,
                        )
                        or [],
                        "sharedCounters": _plain_list(
                            sl.shared_counters, f"{spath}.sharedCounters", errors
                        ),
                        "perDeviceNodeSelection": sl.per_device_node_selection,
                        **_carried(sl, spath, errors),
                    }
                )
        pools[name] = {
            "devices": _plain_list(
                pool.devices,
                f"{path}.devices",
                errors,
                share_plain=True,
                convert=convert_devices,
            ),
            "slices": slices,
            "nodeSelector": _plain(pool.node_selector, f"{path}.nodeSelector", errors),
            "allNodes": pool.all_nodes,
            "nodeName": node_name,
            "generation": pool.generation,
            "maxDevicesPerSlice": pool.max_devices_per_slice,
        }
    return pools, errors


def owner_ref(owner: Owner | None) -> OwnerRef | None:
    """The owner as the core's ``(apiVersion, kind, name, uid)``."""
    return None if owner is None else (owner.api_version, owner.kind, owner.name, owner.uid)


def prepare(
    driver: str,
    resources: DriverResources,
    node_name: str | None,
    max_slice_bytes: int,
    only_pool: str | None = None,
    *,
    problems: Sequence[str] = (),
) -> tuple[Desired | None, list[str]]:
    """The core's desired state of ``resources``, or None and every problem found: what a
    controller of ``driver`` would publish, the Node ``node_name``'s (its owner's) or
    cluster-wide, only pool ``only_pool`` when given (``reconcile_pool_with_name``).

    One place for the controller (``update()`` and, through :func:`prepare_devices`,
    ``update_devices()``), ``rs.plan``/``rs.validate`` and the command, so that what one
    accepts the others accept too. ``problems``: what the caller found wrong already, reported
    first; like a shape problem, any of them keeps the core from validating the rest.

    Devices go to the core as the caller gave them: it reads plain ones once, validating as
    it reads, and says when any is not (a model object, a tuple). Only then, or when there are
    problems to report in their order, are they converted first and read again, as always.
    """
    pools, errors = to_plain_pools(resources, node_name, convert_devices=False)
    errors = [*problems, *errors, *_scope_errors(pools, node_name, only_pool)]
    if not errors:
        desired, core_errors = core.prepare_desired(driver, pools, max_slice_bytes, plain_only=True)
        if core_errors is not None:
            return desired, core_errors
    pools, errors = to_plain_pools(resources, node_name)
    errors = [*problems, *errors, *_scope_errors(pools, node_name, only_pool)]
    if errors:
        return None, errors
    return core.prepare_desired(driver, pools, max_slice_bytes)


def prepare_devices(
    driver: str,
    pool: str,
    upsert: Iterable[Device | KubernetesModel],
    removed: list[str],
    node_name: str | None,
    max_slice_bytes: int,
) -> tuple[Desired | None, list[str]]:
    """``update_devices()``'s change of ``pool`` as a desired state of its own, holding only
    the devices of ``upsert`` (for ``Desired.with_devices``), or None and every problem
    found, those of ``removed`` (the names taken out) first.

    Through :func:`prepare`, as ``update()``'s whole state: one way into validation. Not
    limited to ``reconcile_pool_with_name``'s pool: whether ``pool`` is one the controller
    publishes is for ``with_devices`` to say, against the desired state.
    """
    problems = [
        f"remove[{i}]: must be a string" for i, n in enumerate(removed) if type(n) is not str
    ]
    # The devices alone, as a pool of their own: the pool's node selection does not change
    # what is valid in a flat pool's device, and the edit keeps the pool's own.
    batch = Pool(devices=list(upsert), all_nodes=node_name is None)
    return prepare(
        driver,
        DriverResources(pools={pool: batch}),
        node_name,
        max_slice_bytes,
        problems=problems,
    )


def _scope_errors(
    pools: dict[str, dict[str, Any]], node_name: str | None, only_pool: str | None
) -> list[str]:
    """Pools outside what this controller may publish."""
    errors: list[str] = []
    if only_pool is not None:
        errors += [
            f'pools["{name}"]: only pool "{only_pool}" is reconciled (reconcile_pool_with_name)'
            for name in sorted(pools)
            if name != only_pool
        ]
    if node_name is not None:
        # The informer of a Node owner sees only slices with that spec.nodeName: a pool
        # published cluster-wide would be invisible to it, and created again and again.
        errors += [
            f'pools["{name}"]: a Node owner publishes only node-local pools; '
            "use reconcile_pool_with_name for a pool with a node selection of its own"
            for name, pool in sorted(pools.items())
            if pool["nodeSelector"] is not None
            or pool["allNodes"]
            or any(s["perDeviceNodeSelection"] for s in pool["slices"] or ())
        ]
    return errors
