"""``resourceslice diff``: what ``publish`` would change in the cluster, as ``kubectl diff``
shows it; nothing is written."""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

import yaml

from resourceslice._errortext import describe_error
from resourceslice.cli.common import (
    EXIT_USAGE,
    UserError,
    add_cluster_arguments,
    add_file_arguments,
    api_client,
    cluster_plans,
    load,
    node_owner,
    selection_of,
)

if TYPE_CHECKING:
    from resourceslice import _core as core
else:
    from resourceslice._backend import core

#: kubectl diff's exit codes: 0 no differences, 1 differences, >1 an error.
EXIT_SAME, EXIT_DIFFERENT = 0, 1

# What the apiserver sets on a stored object, and no one asks for: kubectl diff's merged side
# has them from a dry run; here both sides go without them, so only what publish changes shows.
_SERVER_SET = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation")

_YamlDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _shown(obj: Mapping[str, Any] | None) -> list[str]:
    """The object as YAML lines, keys sorted, without what the server sets."""
    if obj is None:
        return []
    obj = dict(obj)
    obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in _SERVER_SET}
    obj.pop("status", None)
    text: str = yaml.dump(obj, Dumper=_YamlDumper, sort_keys=True, allow_unicode=True)
    return text.splitlines(keepends=True)


def unified(name: str, live: Mapping[str, Any] | None, merged: Mapping[str, Any] | None) -> str:
    """One slice's difference in ``diff -u -N`` form, under kubectl diff's file names."""
    path = f"resource.k8s.io.v1.ResourceSlice.{name}"
    lines = difflib.unified_diff(
        _shown(live), _shown(merged), fromfile=f"LIVE/{path}", tofile=f"MERGED/{path}"
    )
    body = "".join(lines)
    return f"diff -u -N LIVE/{path} MERGED/{path}\n{body}" if body else ""


HELP = "show what publish would change, as kubectl diff (exit 1: differences)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    add_file_arguments(parser)


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from urllib3.exceptions import HTTPError

    from resourceslice._apiversion import ResourceSliceAPI
    from resourceslice.connection import ApiError
    from resourceslice.informer import field_selector

    loaded = load(args.file, args.driver, selection_of(args))
    try:
        with api_client(args.kubeconfig, args.context) as client:
            owner = node_owner(client, args.node)
            # The slices publish would see (its informer's selector), read once: the records
            # to plan against, and the objects to show.
            data = ResourceSliceAPI(client).list(field_selector(args.driver, args.node, False))
    except UserError as exc:  # a missing Node: an error, not "differences found"
        raise UserError(str(exc), EXIT_USAGE) from None
    except (ApiError, HTTPError, OSError) as exc:
        raise UserError(describe_error(exc), EXIT_USAGE) from None
    records = core.decode_list(data)[1]
    live = {item["metadata"]["name"]: item for item in json.loads(data)["items"]}
    shown = []
    for plan in cluster_plans(loaded, records, owner, args.node):
        shown += [unified(name, live.get(name), None) for name, _, _ in plan.deletes]
        shown += [unified(name, live.get(name), json.loads(body)) for name, body in plan.updates]
        for body in plan.creates:
            created = json.loads(body)
            shown.append(unified(created["metadata"]["name"], None, created))
    text = "".join(shown)
    out.write(text)
    return EXIT_DIFFERENT if text else EXIT_SAME
