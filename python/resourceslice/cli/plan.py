"""``resourceslice plan``: the ResourceSlices FILE becomes, without a cluster."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import yaml

from resourceslice.cli.common import EXIT_OK, add_file_arguments, counted, load, selection_of
from resourceslice.preview import first_plans

if TYPE_CHECKING:
    from resourceslice._core import Plan

_YamlDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass
class Totals:
    pools: int = 0
    slices: int = 0
    devices: int = 0

    def __str__(self) -> str:
        return ", ".join(
            [
                counted(self.pools, "pool"),
                counted(self.slices, "slice"),
                counted(self.devices, "device"),
            ]
        )


def totals_of(plans: Sequence[Plan]) -> Totals:
    return Totals(
        pools=len(plans),
        slices=sum(plan.slice_count for plan in plans),
        devices=sum(plan.device_count for plan in plans),
    )


def render(objects: Sequence[Mapping[str, Any]], output: str) -> str:
    """``kubectl -o yaml`` style: one YAML document per object; ``json``: a v1 List."""
    if output == "json":
        listing = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
        return json.dumps(listing, indent=2, ensure_ascii=False) + "\n"
    text: str = yaml.dump_all(
        objects, Dumper=_YamlDumper, sort_keys=False, allow_unicode=True, default_flow_style=False
    )
    return text


HELP = "print the ResourceSlices FILE becomes, without a cluster"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_file_arguments(parser)
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    loaded = load(args.file, args.driver, selection_of(args))
    plans = first_plans(loaded.desired, args.node)
    objects = [json.loads(body) for plan in plans for body in plan.creates]
    out.write(render(objects, args.output))
    err.write(f"{totals_of(plans)} (dry run: nothing was sent)\n")
    return EXIT_OK
