"""What a driver's resources become, without a cluster: :func:`plan` and :func:`validate`.

The controller's own validation and packing, run on their own: ``resourceslice plan`` is
:func:`plan` on a pool file. Useful in a driver's unit tests, a CI check of a pool file,
or to see what a change of devices does before it is published.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from resourceslice._plain import prepare
from resourceslice._poolfile import with_selection
from resourceslice.api import DriverResources, ValidationError
from resourceslice.controller import DEFAULT_MAX_SLICE_BYTES

if TYPE_CHECKING:
    from resourceslice import _core as core
    from resourceslice._core import Desired, Plan
    from resourceslice.types import KubernetesModel, NodeSelector
else:
    from resourceslice._backend import core

__all__ = ["plan", "validate"]


def validate(
    resources: DriverResources,
    *,
    driver: str,
    node: str | None = None,
    all_nodes: bool = False,
    node_selector: NodeSelector | KubernetesModel | None = None,
    max_slice_bytes: int = DEFAULT_MAX_SLICE_BYTES,
) -> list[str]:
    """Every problem of ``resources`` for ``driver``, each with its path
    (``pools["a"].devices[3].name: ...``); empty when they are valid. Never raises for them:
    the list is what :class:`resourceslice.ValidationError` would carry.

    ``node``: checked as a controller whose owner is that Node checks them (node-local pools
    only). ``all_nodes`` / ``node_selector``: where the pools that name no node selection of
    their own are, as the command's ``--all-nodes`` / ``--node-selector``. At most one of the
    three. ``max_slice_bytes``: the controller's option of that name.
    """
    return _prepare(resources, driver, node, all_nodes, node_selector, max_slice_bytes)[1]


def plan(
    resources: DriverResources,
    *,
    driver: str,
    node: str | None = None,
    all_nodes: bool = False,
    node_selector: NodeSelector | KubernetesModel | None = None,
    max_slice_bytes: int = DEFAULT_MAX_SLICE_BYTES,
) -> list[dict[str, Any]]:
    """The ResourceSlices a controller of ``driver`` would create for ``resources`` in a
    cluster that has none yet: each in the REST JSON shape (``apiVersion``, ``kind``,
    ``metadata``, ``spec``), pools in name order, the slices of each in index order, with
    the names, packing, generation and counts the controller gives them. The keywords are
    :func:`validate`'s; a ``node`` also gives each slice ``spec.nodeName`` and the Node as
    owner (without a uid: the controller looks it up). Raises
    :class:`resourceslice.ValidationError` listing every problem of invalid ``resources``.

    ``resourceslice plan FILE`` prints the same slices for the pool file
    (``rs.plan(rs.load_resources(FILE, node=...), driver=..., node=...)``).
    """
    desired, errors = _prepare(resources, driver, node, all_nodes, node_selector, max_slice_bytes)
    if desired is None:
        raise ValidationError(errors)
    return [
        json.loads(body) for pool_plan in first_plans(desired, node) for body in pool_plan.creates
    ]


def first_plans(desired: Desired, node: str | None) -> list[Plan]:
    """Each pool's plan against an empty cluster: what a first publish creates."""
    owner = ("v1", "Node", node, "") if node else None
    return [core.plan_pool(desired, pool, [], owner, node) for pool in desired.pool_names()]


def _prepare(
    resources: DriverResources,
    driver: str,
    node: str | None,
    all_nodes: bool,
    node_selector: NodeSelector | KubernetesModel | None,
    max_slice_bytes: int,
) -> tuple[Desired | None, list[str]]:
    if sum((node is not None, all_nodes, node_selector is not None)) > 1:
        raise TypeError("give at most one of node, all_nodes and node_selector")
    if (all_nodes or node_selector is not None) and isinstance(resources, DriverResources):
        resources = DriverResources(
            pools={
                name: with_selection(pool, all_nodes, node_selector)
                for name, pool in resources.pools.items()
            }
        )
    return prepare(driver, resources, node, max_slice_bytes)
