"""The command line: the subcommands wired into one parser, and running one command with its
exit code."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import IO, Protocol

from resourceslice._errortext import describe_error
from resourceslice.cli import diff, plan, prune, publish, status
from resourceslice.cli.common import EXIT_FAILED, UserError


class Subcommand(Protocol):
    """A subcommand's module: its arguments are declared next to the code that reads them."""

    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int: ...


#: The subcommands, in ``--help``'s order; build_parser only wires them up.
SUBCOMMANDS: dict[str, Subcommand] = {
    "plan": plan,
    "publish": publish,
    "status": status,
    "prune": prune,
    "diff": diff,
}


def _version() -> str:
    import resourceslice

    return f"resourceslice {resourceslice.__version__} (core: {resourceslice.core_backend()})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="resourceslice",
        description="Plan, publish and check DRA ResourceSlices (resource.k8s.io).",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # -v after the subcommand too (as kubectl takes flags anywhere). SUPPRESS: a subcommand
    # without it keeps what was given before the subcommand.
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more logging"
    )
    for name, module in SUBCOMMANDS.items():
        sub = commands.add_parser(name, parents=[verbose], help=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.run(args, sys.stdout, sys.stderr)
    except UserError as exc:
        print(f"resourceslice: {exc}", file=sys.stderr)
        return exc.code
    except Exception as exc:
        from urllib3.exceptions import HTTPError

        from resourceslice.connection import ApiError

        if not isinstance(exc, (ApiError, HTTPError, OSError)):
            raise
        print(f"resourceslice: {describe_error(exc)}", file=sys.stderr)
        return EXIT_FAILED
    return code
