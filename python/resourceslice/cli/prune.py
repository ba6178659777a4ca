"""``resourceslice prune``: delete the driver's ResourceSlices, on uninstall."""

from __future__ import annotations

import argparse
from typing import IO

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

#: Rounds of list-and-delete: a slice changed between the list and its delete is listed again.
_PRUNE_ROUNDS = 3


HELP = "delete the driver's ResourceSlices (on uninstall)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    add_driver_argument(parser)
    parser.add_argument("--node", help="only the slices of this node")
    parser.add_argument(
        "--yes", action="store_true", help="delete (without it: a dry run that only lists)"
    )
    parser.add_argument("-o", "--output", choices=("json", "yaml"), help="(default: a list)")


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Delete the driver's slices (of one node with ``--node``): for an uninstall, once the
    driver is stopped (a running one publishes them again). Without ``--yes``, a dry run: it
    lists them and succeeds, so that a script can look before it deletes."""
    from resourceslice._apiversion import ResourceSliceAPI
    from resourceslice.connection import ApiError
    from resourceslice.informer import field_selector

    where = f" on node {args.node}" if args.node else ""
    selector = field_selector(args.driver, args.node, args.node is None)
    client = api_client(args.kubeconfig, args.context)
    with client:
        records = list_records(client, selector)
        listed = [{"name": r.name, "pool": r.pool, "node": r.node_name or ""} for r in records]
        if not args.yes:
            if args.output:
                out.write(structured({"deleted": False, "slices": listed}, args.output))
            elif records:
                out.write("".join(f"{r.name}  pool {r.pool}\n" for r in records))
            err.write(
                f"{counted(len(records), 'ResourceSlice')} of driver {args.driver}{where}; "
                "nothing deleted (dry run): pass --yes to delete them\n"
            )
            return EXIT_OK
        api = ResourceSliceAPI(client)
        deleted = 0
        for _ in range(_PRUNE_ROUNDS):
            for record in records:
                try:
                    # Preconditions: what was listed, not a slice recreated meanwhile.
                    api.delete(record.name, record.uid, record.resource_version)
                    deleted += 1
                except ApiError as exc:
                    if exc.status not in (404, 409):  # 404: gone; 409: changed, listed again
                        raise
            records = list_records(client, selector)
            if not records:
                break
    if args.output:
        out.write(structured({"deleted": True, "slices": listed}, args.output))
    else:
        out.write(f"deleted {counted(deleted, 'ResourceSlice')} of driver {args.driver}{where}\n")
    if records:
        err.write(
            f"error: {counted(len(records), 'ResourceSlice')} came back while deleting: "
            "is the driver still running?\n"
        )
        return EXIT_FAILED
    return EXIT_OK
