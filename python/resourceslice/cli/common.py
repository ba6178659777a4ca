"""What the commands share: exit codes, user errors, FILE as the command reads it (and its
arguments), the cluster client (and its arguments) and its errors."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from resourceslice._errortext import describe_error
from resourceslice._kubeconfig import in_cluster, kubeconfig_paths
from resourceslice._plain import owner_ref, prepare
from resourceslice._poolfile import Selection, parse_resources, read_document
from resourceslice.api import DriverResources, Owner, ValidationError
from resourceslice.connection import ConfigError, connect
from resourceslice.controller import DEFAULT_MAX_SLICE_BYTES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from resourceslice import _core as core
    from resourceslice._core import Desired, Plan, SliceRecord
    from resourceslice.connection import Client
    from resourceslice.types import NodeSelector, NodeSelectorOperator, NodeSelectorRequirement
else:
    from resourceslice._backend import core

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

#: The controller's default: the same budget makes ``plan`` pack exactly as ``publish`` does.
MAX_SLICE_BYTES = DEFAULT_MAX_SLICE_BYTES


class UserError(Exception):
    """Something the user can fix (arguments, FILE, kubeconfig): printed as is, no traceback."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass(frozen=True)
class Loaded:
    """A FILE that passed validation: what the controller is given, and the core's view of it."""

    resources: DriverResources
    desired: Desired


def load(path: Path, driver: str, selection: Selection) -> Loaded:
    """Read and validate FILE for ``driver``; UserError listing every problem with its path."""
    try:
        document = read_document(path)
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
    except ValidationError as exc:  # not YAML or JSON: where the parser gave up
        raise UserError(f"{path}: {exc.errors[0]}") from None
    resources, errors = parse_resources(document, selection)
    if not errors:
        desired, errors = prepare(driver, resources, selection.node, MAX_SLICE_BYTES)
        if desired is not None:
            return Loaded(resources, desired)
    shown = errors[:50]
    more = f"\n  … and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
    raise UserError(f"{path}: invalid:\n  " + "\n  ".join(shown) + more)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """How a command that talks to the cluster reaches it: kubectl's flags."""
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    parser.add_argument("--context", help="kubeconfig context to use")


def add_driver_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--driver", required=True, help="the DRA driver name, e.g. gpu.example.com")


def add_file_arguments(parser: argparse.ArgumentParser) -> None:
    """FILE, the driver, and which nodes pools without their own selection are for: what
    :func:`load` and :func:`selection_of` read."""
    parser.add_argument("file", type=Path, metavar="FILE", help="pools as YAML or JSON")
    add_driver_argument(parser)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--node", help="the slices are this Node's (it owns them)")
    where.add_argument(
        "--all-nodes", action="store_true", help="pools without their own selection: every node"
    )
    where.add_argument(
        "--node-selector",
        metavar="SELECTOR",
        help="pools without their own selection: these nodes (key=value,key!=value,key,!key)",
    )


def selection_of(args: argparse.Namespace) -> Selection:
    selector = parse_node_selector(args.node_selector) if args.node_selector else None
    return Selection(node=args.node, all_nodes=args.all_nodes, node_selector=selector)


_SELECTOR_TERM = re.compile(r"(?P<not>!)?(?P<key>[^\s=!]+)(?:\s*(?P<op>==|=|!=)\s*(?P<value>\S*))?")
_OPERATORS: dict[str, NodeSelectorOperator] = {"=": "In", "==": "In", "!=": "NotIn"}


def parse_node_selector(text: str) -> NodeSelector:
    """``key=value,key!=value,key,!key`` (kubectl's label selector syntax) as a NodeSelector."""
    expressions: list[NodeSelectorRequirement] = []
    for term in text.split(","):
        match = _SELECTOR_TERM.fullmatch(term.strip())
        if match is None or (match["not"] and match["op"]):
            raise UserError(f"--node-selector: cannot parse {term.strip()!r}")
        if match["op"]:
            expr: NodeSelectorRequirement = {
                "key": match["key"],
                "operator": _OPERATORS[match["op"]],
                "values": [match["value"]],
            }
        else:
            expr = {"key": match["key"], "operator": "DoesNotExist" if match["not"] else "Exists"}
        expressions.append(expr)
    return {"nodeSelectorTerms": [{"matchExpressions": expressions}]}


def api_client(kubeconfig: str | None, context: str | None) -> Client:
    paths = kubeconfig_paths(kubeconfig)
    if paths is None and not in_cluster():
        raise UserError(
            "no kubeconfig: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, "
            "or run in a Pod (in-cluster config)"
        )
    try:
        return connect(paths, context)
    except (ConfigError, OSError) as exc:
        raise UserError(f"kubeconfig {paths or '(in-cluster)'}: {exc}") from None


def list_records(client: Client, selector: str) -> list[SliceRecord]:
    from resourceslice._apiversion import ResourceSliceAPI

    return core.decode_list(ResourceSliceAPI(client).list(selector))[1]


def node_owner(client: Client, node: str | None) -> Owner | None:
    """The Node owner of ``--node`` with its uid, so that writes can be planned before the
    controller makes them; None without ``--node``."""
    if not node:
        return None
    from resourceslice._http import node_uid
    from resourceslice.connection import ApiError

    try:
        uid = node_uid(client, node)
    except ApiError as exc:
        raise UserError(
            f"node {node}: {describe_error(exc)} (the Node owns the slices, so it must exist)",
            EXIT_FAILED,
        ) from None
    return Owner(api_version="v1", kind="Node", name=node, uid=uid)


def cluster_plans(
    loaded: Loaded, records: Sequence[SliceRecord], owner: Owner | None, node: str | None
) -> list[Plan]:
    """Each pool's plan against the cluster's slices ``records``, as the controller plans
    it: the pools of FILE, and those only the cluster has (publish deletes them)."""
    by_pool: dict[str, list[SliceRecord]] = {}
    for record in records:
        by_pool.setdefault(record.pool, []).append(record)
    return [
        core.plan_pool(loaded.desired, pool, by_pool.get(pool, []), owner_ref(owner), node)
        for pool in sorted(set(by_pool) | set(loaded.desired.pool_names()))
    ]


def structured(value: Any, output: str) -> str:
    """``-o json`` / ``-o yaml`` of a command's result (kubectl's indentation)."""
    if output == "json":
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    import yaml

    text: str = yaml.safe_dump(value, sort_keys=False, allow_unicode=True)
    return text
