"""``resourceslice publish``: publish FILE's pools and keep them in sync, following FILE."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING

from resourceslice._errortext import describe_error
from resourceslice._kubeconfig import kubeconfig_paths
from resourceslice._poolfile import Selection
from resourceslice.api import Owner, Stats
from resourceslice.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    Loaded,
    UserError,
    add_cluster_arguments,
    add_file_arguments,
    api_client,
    cluster_plans,
    counted,
    list_records,
    load,
    node_owner,
    selection_of,
)
from resourceslice.cli.plan import totals_of
from resourceslice.preview import first_plans

if TYPE_CHECKING:
    from resourceslice import metrics
    from resourceslice.connection import Client
    from resourceslice.controller import Controller
    from resourceslice.leaderelection import LeaderElection
else:
    pass

#: The namespace of a Pod's service account: the Lease's, when none is given in-cluster.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _writes(stats: Stats) -> int:
    return stats.creates + stats.updates + stats.deletes


def _delta(before: Stats, after: Stats) -> str:
    return ", ".join(
        [
            counted(after.creates - before.creates, "create"),
            counted(after.updates - before.updates, "update"),
            counted(after.deletes - before.deletes, "delete"),
        ]
    )


class FileWatch:
    """Tells when FILE's content changed; a cheap stat first, then a hash of the bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stat = self._stat_key()
        self._digest = self._read_digest()

    def _stat_key(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _read_digest(self) -> bytes | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).digest()
        except OSError:
            return None

    def changed(self) -> bool:
        key = self._stat_key()
        if key == self._stat:
            return False
        self._stat = key
        digest = self._read_digest()
        if digest == self._digest or digest is None:
            return False
        self._digest = digest
        return True


class Publisher:
    """One ``publish`` run: the controller, its progress, and FILE's reloads."""

    def __init__(self, args: argparse.Namespace, out: IO[str], err: IO[str]) -> None:
        self.args = args
        self.out, self.err = out, err
        self.stop = threading.Event()
        self.tty = out.isatty()
        self.failures = 0

    def say(self, text: str) -> None:
        self.out.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        self.out.flush()

    def on_error(self, exc: BaseException, message: str) -> None:
        self.failures += 1
        self.err.write(f"error: {message}: {describe_error(exc)}\n")
        self.err.flush()

    def run(self) -> int:
        import resourceslice

        args = self.args
        if args.leader_elect and args.once:
            raise UserError("--once and --leader-elect: a standby would never be done")
        if args.shards > 1 and not args.leader_elect:
            raise UserError("--shards needs --leader-elect")
        selection = selection_of(args)
        # Before the first read: an edit that lands while FILE is being loaded is followed.
        watch = FileWatch(args.file)
        loaded = load(args.file, args.driver, selection)
        election = leader_election_of(args) if args.leader_elect else None
        client = api_client(args.kubeconfig, args.context)
        with client, self._serving() as server:
            owner = node_owner(client, args.node)
            planned = self._planned_writes(client, loaded, owner)
            self.say(
                f"publishing {args.file} for driver {args.driver}"
                + (f" on node {args.node}" if args.node else "")
                + f": {totals_of(first_plans(loaded.desired, args.node))}; "
                + f"{counted(planned, 'write')} needed"
            )
            controller = resourceslice.start_controller(
                client,
                driver=args.driver,
                owner=owner,
                resources=loaded.resources,
                # The file is the whole desired state from the start, so there is no
                # half-started driver to protect: repair drift and stale pools at once.
                sync_delay=0.0,
                error_handler=self.on_error,
                leader_election=election,
            )
            if server is not None:
                server.add(controller)
            with controller:
                if election is not None:
                    self.say(
                        f"leader election: lease {election.namespace}/{election.name} "
                        f"as {election.identity}; standby until it holds the lease"
                    )
                elif not self._wait(controller, Stats(), planned, args.timeout):
                    return EXIT_FAILED
                if not args.once:
                    self._follow(controller, selection, watch)
        return EXIT_OK

    @contextlib.contextmanager
    def _serving(self) -> Iterator[metrics.MetricsServer | None]:
        """``--metrics-address``: /metrics and the health endpoints while publishing."""
        if self.args.metrics_address is None:
            yield None
            return
        try:
            from resourceslice import metrics
        except ImportError as exc:
            raise UserError(
                f"--metrics-address needs {exc.name}: the package's metrics extra "
                "(pip install 'prometheus-client>=0.17')"
            ) from None
        host, port = self.args.metrics_address
        try:
            server = metrics.serve(host, port)
        except OSError as exc:
            raise UserError(f"--metrics-address {host}:{port}: {exc.strerror or exc}") from None
        with server:
            shown_host, shown_port = server.address
            shown = f"[{shown_host}]" if ":" in shown_host else shown_host
            base = f"http://{shown}:{shown_port}"
            self.say(f"serving {base}/metrics and {base}/healthz")
            yield server

    def _planned_writes(self, client: Client, loaded: Loaded, owner: Owner | None) -> int:
        """What the controller will write, planned as it plans: for the progress display."""
        from resourceslice.informer import field_selector

        records = list_records(client, field_selector(self.args.driver, self.args.node, False))
        plans = cluster_plans(loaded, records, owner, self.args.node)
        return sum(len(p.deletes) + len(p.updates) + len(p.creates) for p in plans)

    def _wait(self, controller: Controller, before: Stats, planned: int, timeout: float) -> bool:
        """Wait until the cluster matches FILE: the controller is idle, so pools no longer in
        FILE are deleted too, which ``wait_synced`` does not wait for. ``planned`` is for the
        progress display only: another writer may have made some of those writes."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            if not controller.is_leader():
                return False  # lost the lease: _follow says so
            in_sync = controller.wait_idle(0.2)
            stats = controller.stats()  # after the wait: it may have ended with the last write
            done = _writes(stats) - _writes(before)
            if self.tty:
                self.out.write(f"\r  slices written: {done}/{planned}")
                self.out.flush()
            if in_sync:
                if self.tty:
                    self.out.write("\n")
                self.say(f"synced in {time.monotonic() - started:.1f}s: {_delta(before, stats)}")
                return True
            if self.stop.is_set() or time.monotonic() > deadline:
                if self.tty:
                    self.out.write("\n")
                why = "interrupted" if self.stop.is_set() else f"not synced after {timeout:.0f}s"
                self.err.write(f"error: {why} ({done}/{planned} writes made)\n")
                for pool, error in sorted(controller.health().failing.items()):
                    self.err.write(f"  pool {pool}: {error}\n")
                return False

    def _follow(self, controller: Controller, selection: Selection, watch: FileWatch) -> None:
        """Keep publishing: reload FILE when it changes; keep the last good state if bad."""
        args = self.args
        self.say(f"watching {args.file} for changes (Ctrl-C to stop)")
        last = controller.stats()
        leading = False
        while not self.stop.wait(args.interval):
            if self.args.leader_elect and controller.is_leader() != leading:
                leading = not leading
                if leading:
                    # From `last`: the first writes may be made before this loop noticed.
                    self.say("took the lease: publishing")
                    self._wait(controller, last, 0, args.timeout)
                else:
                    self.say("lost the lease: standby, writing nothing")
                last = controller.stats()
            if watch.changed():
                try:
                    loaded = load(args.file, args.driver, selection)
                    before = controller.stats()
                    controller.update(loaded.resources)
                except Exception as exc:
                    # Whatever is wrong with the new FILE, the pod keeps publishing the last
                    # good one; crashing would restart it on the same bad FILE, in a loop.
                    text = (
                        str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
                    )
                    self.err.write(f"error: {text}\n  keeping the last good state\n")
                    self.err.flush()
                    continue
                self.say(
                    f"{args.file} changed: {totals_of(first_plans(loaded.desired, args.node))}"
                )
                if controller.is_leader():
                    self._wait(controller, before, 0, args.timeout)
                last = controller.stats()
            stats = controller.stats()
            if _writes(stats) != _writes(last):
                # Someone else changed or deleted our slices; the controller put them back.
                self.say(f"cluster drift repaired: {_delta(last, stats)}")
                last = stats
        self.say("stopping (the slices stay as they are)")


HELP = "publish FILE's pools and keep them in sync"


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


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number, at least 1, not {text}")
    return int(text)


def _whole_seconds(text: str) -> int:
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"must be whole seconds, at least 2, not {text}")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    add_file_arguments(parser)
    parser.add_argument("--once", action="store_true", help="exit once the cluster matches FILE")
    parser.add_argument(
        "--timeout", type=_positive, default=300.0, help="seconds to wait for a sync (300)"
    )
    parser.add_argument(
        "--interval", type=_positive, default=1.0, help="seconds between checks of FILE (1)"
    )
    parser.add_argument(
        "--metrics-address",
        type=_host_port,
        metavar="HOST:PORT",
        help="serve Prometheus /metrics and /healthz, /livez, /readyz here "
        "(needs resourceslice[metrics])",
    )
    election = parser.add_argument_group(
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


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    publisher = Publisher(args, out, err)

    def interrupted(signum: int, frame: FrameType | None) -> None:
        publisher.stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, interrupted)
        signal.signal(signal.SIGTERM, interrupted)
    return publisher.run()


def leader_election_of(args: argparse.Namespace) -> LeaderElection:
    """``--leader-elect``'s Lease: one per driver (and node), in the namespace of the Pod,
    else of the kubeconfig's context, else ``default``."""
    from resourceslice.leaderelection import LeaderElection, default_identity

    name = args.lease_name or f"resourceslice-{args.driver}" + (
        f"-{args.node}" if args.node else ""
    )
    namespace = args.lease_namespace or _current_namespace(args)
    return LeaderElection(
        namespace,
        name,
        identity=default_identity(),
        lease_duration=args.lease_duration,
        renew_deadline=args.lease_duration * 2 / 3,
        retry_period=args.lease_duration * 2 / 15,
        shards=args.shards,
    )


def _current_namespace(args: argparse.Namespace) -> str:
    paths = kubeconfig_paths(args.kubeconfig)
    if paths is None:
        with contextlib.suppress(OSError):
            return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
        return "default"
    import kubernetes.config
    from kubernetes.config.config_exception import ConfigException

    try:
        contexts, active = kubernetes.config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=paths
        )
    except (ConfigException, OSError) as exc:
        raise UserError(f"kubeconfig {paths}: {exc}") from None
    chosen = next((c for c in contexts if c["name"] == args.context), active)
    return str((chosen or {}).get("context", {}).get("namespace") or "default")
