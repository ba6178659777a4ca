"""The command line: its arguments, and running one command with its exit code."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from resourceslice._errortext import describe_error
from resourceslice.cli.common import EXIT_FAILED, UserError
from resourceslice.cli.diff import cmd_diff
from resourceslice.cli.plan import cmd_plan
from resourceslice.cli.prune import cmd_prune
from resourceslice.cli.publish import cmd_publish
from resourceslice.cli.status import cmd_status


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
    return value


def _host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (every interface) or ``[IPv6]:PORT``; port 0: any free one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not {text!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _version() -> str:
    import resourceslice

    return f"resourceslice {resourceslice.__version__} (core: {resourceslice.core_backend()})"


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number, at least 1, not {text}")
    return int(text)


def _whole_seconds(text: str) -> int:
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"must be whole seconds, at least 2, not {text}")
    return int(text)


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
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more logging"
    )
    cluster = argparse.ArgumentParser(add_help=False, parents=[common])
    cluster.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    cluster.add_argument("--context", help="kubeconfig context to use")

    def driver_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--driver", required=True, help="the DRA driver name, e.g. gpu.example.com")

    def file_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("file", type=Path, metavar="FILE", help="pools as YAML or JSON")
        driver_args(p)
        where = p.add_mutually_exclusive_group()
        where.add_argument("--node", help="the slices are this Node's (it owns them)")
        where.add_argument(
            "--all-nodes", action="store_true", help="pools without their own selection: every node"
        )
        where.add_argument(
            "--node-selector",
            metavar="SELECTOR",
            help="pools without their own selection: these nodes (key=value,key!=value,key,!key)",
        )

    plan = commands.add_parser(
        "plan", parents=[common], help="print the ResourceSlices FILE becomes, without a cluster"
    )
    file_args(plan)
    plan.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    plan.set_defaults(run=cmd_plan)

    publish = commands.add_parser(
        "publish", parents=[cluster], help="publish FILE's pools and keep them in sync"
    )
    file_args(publish)
    publish.add_argument("--once", action="store_true", help="exit once the cluster matches FILE")
    publish.add_argument(
        "--timeout", type=_positive, default=300.0, help="seconds to wait for a sync (300)"
    )
    publish.add_argument(
        "--interval", type=_positive, default=1.0, help="seconds between checks of FILE (1)"
    )
    publish.add_argument(
        "--metrics-address",
        type=_host_port,
        metavar="HOST:PORT",
        help="serve Prometheus /metrics and /healthz, /livez, /readyz here "
        "(needs resourceslice[metrics])",
    )
    election = publish.add_argument_group(
        "leader election", "several replicas: the one holding a Lease publishes"
    )
    election.add_argument(
        "--leader-elect",
        action="store_true",
        help="publish only while holding the Lease (coordination.k8s.io/v1); not with --once",
    )
    election.add_argument(
        "--lease-namespace",
        metavar="NS",
        help="the Lease's namespace (default: the Pod's, else the kubeconfig context's, "
        "else default)",
    )
    election.add_argument(
        "--lease-name",
        metavar="NAME",
        help="the Lease's name (default: resourceslice-DRIVER, -NODE appended with --node)",
    )
    election.add_argument(
        "--lease-duration",
        type=_whole_seconds,
        default=15,
        metavar="SECONDS",
        help="how long a standby waits for a silent leader before taking over (15); the "
        "leader renews every 2/15 of it and stops writing 2/3 of it after its last renewal",
    )
    election.add_argument(
        "--shards",
        type=_at_least_one,
        default=1,
        metavar="K",
        help="split the pools into K shards, a Lease each (NAME-shard-I), spread over the "
        "replicas (1: one leader publishes every pool)",
    )
    publish.set_defaults(run=cmd_publish)

    status = commands.add_parser(
        "status", parents=[cluster], help="is every pool of the driver complete and consistent?"
    )
    driver_args(status)
    status.add_argument("--node", help="only the slices of this node")
    status.add_argument("-o", "--output", choices=("json", "yaml"), help="(default: a table)")
    status.set_defaults(run=cmd_status)

    prune = commands.add_parser(
        "prune", parents=[cluster], help="delete the driver's ResourceSlices (on uninstall)"
    )
    driver_args(prune)
    prune.add_argument("--node", help="only the slices of this node")
    prune.add_argument(
        "--yes", action="store_true", help="delete (without it: a dry run that only lists)"
    )
    prune.add_argument("-o", "--output", choices=("json", "yaml"), help="(default: a list)")
    prune.set_defaults(run=cmd_prune)

    diff = commands.add_parser(
        "diff",
        parents=[cluster],
        help="show what publish would change, as kubectl diff (exit 1: differences)",
    )
    file_args(diff)
    diff.set_defaults(run=cmd_diff)
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
