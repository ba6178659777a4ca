"""``resourceslice status``: is every pool of the driver one a scheduler would use?"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from resourceslice.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_cluster_arguments,
    add_driver_argument,
    api_client,
    counted,
    list_records,
    structured,
)

if TYPE_CHECKING:
    from resourceslice._core import SliceRecord


@dataclass
class PoolStatus:
    """What a scheduler makes of one pool: it uses the pool only when ``ok``."""

    pool: str
    node: str
    generation: int
    seen: int
    expected: int
    devices: int
    obsolete: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, object]:
        """``-o json|yaml``: the table's columns, and the problems as a list."""
        return {
            "pool": self.pool,
            "node": self.node,
            "generation": self.generation,
            "slices": self.seen,
            "resourceSliceCount": self.expected,
            "devices": self.devices,
            "obsoleteSlices": self.obsolete,
            "ok": self.ok,
            "problems": self.problems,
        }

    @property
    def state(self) -> str:
        if self.problems:
            return "; ".join(self.problems)
        return "ok" if not self.obsolete else f"ok ({counted(self.obsolete, 'obsolete slice')})"


def pool_status(pool: str, records: Sequence[SliceRecord]) -> PoolStatus:
    """Complete: every slice of the highest generation is there. Consistent: they agree on
    the count and no device name is in two of them. Lower generations are ignored, as the
    scheduler ignores them."""
    generation = max(r.generation for r in records)
    current = [r for r in records if r.generation == generation]
    counts = sorted({r.resource_slice_count for r in current})
    expected = counts[-1]
    names = Counter(name for r in current for name in r.device_names)
    duplicates = sorted(name for name, n in names.items() if n > 1)
    nodes = sorted({r.node_name or "" for r in current})
    problems: list[str] = []
    if len(counts) > 1:
        problems.append(f"slices disagree on resourceSliceCount ({', '.join(map(str, counts))})")
    if len(current) < expected:
        problems.append(f"incomplete: {expected - len(current)} of {expected} slices missing")
    elif len(current) > expected:
        problems.append(f"{len(current)} slices for resourceSliceCount {expected}")
    if duplicates:
        shown = ", ".join(duplicates[:3]) + (", …" if len(duplicates) > 3 else "")
        problems.append(f"{counted(len(duplicates), 'device')} in more than one slice: {shown}")
    return PoolStatus(
        pool=pool,
        node=",".join(n or "-" for n in nodes),
        generation=generation,
        seen=len(current),
        expected=expected,
        devices=sum(names.values()),
        obsolete=len(records) - len(current),
        problems=problems,
    )


def pool_statuses(records: Sequence[SliceRecord]) -> list[PoolStatus]:
    by_pool: dict[str, list[SliceRecord]] = {}
    for record in records:
        by_pool.setdefault(record.pool, []).append(record)
    return [pool_status(pool, by_pool[pool]) for pool in sorted(by_pool)]


def status_table(statuses: Sequence[PoolStatus]) -> str:
    rows = [("POOL", "NODE", "GENERATION", "SLICES", "DEVICES", "STATUS")]
    rows += [
        (s.pool, s.node, str(s.generation), f"{s.seen}/{s.expected}", str(s.devices), s.state)
        for s in statuses
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] + "\n"
        for row in rows
    )


HELP = "is every pool of the driver complete and consistent?"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    add_driver_argument(parser)
    parser.add_argument("--node", help="only the slices of this node")
    parser.add_argument("-o", "--output", choices=("json", "yaml"), help="(default: a table)")


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from resourceslice.informer import field_selector

    client = api_client(args.kubeconfig, args.context)
    with client:
        records = list_records(client, field_selector(args.driver, args.node, args.node is None))
    where = f" on node {args.node}" if args.node else ""
    statuses = pool_statuses(records)
    if args.output:
        result = {"driver": args.driver, "pools": [s.as_dict() for s in statuses]}
        out.write(structured(result, args.output))
    elif not records:
        out.write(f"no ResourceSlices of driver {args.driver}{where}\n")
    else:
        out.write(status_table(statuses))
    bad = [s.pool for s in statuses if not s.ok]
    if bad:
        err.write(f"{counted(len(bad), 'pool')} not usable by the scheduler: {', '.join(bad)}\n")
        return EXIT_FAILED
    return EXIT_OK
