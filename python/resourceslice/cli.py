"""The ``resourceslice`` command: plan, publish and check a driver's ResourceSlices.

``plan`` needs no cluster; ``publish`` runs a :class:`resourceslice.Controller` over the pools
of a YAML/JSON file; ``status`` says whether each pool in the cluster is one a scheduler
would trust. Cluster access is kubectl's: ``--kubeconfig``, ``KUBECONFIG``,
``~/.kube/config``, then the in-cluster service account.

Exit codes: 0 success; 1 the cluster side failed (an API error, a pool that did not sync in
time, a pool ``status`` finds incomplete or inconsistent); 2 the command line, the FILE or the
kubeconfig is wrong. User errors are one message, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import logging
import re
import signal
import string
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any

import yaml

from resourceslice._kubeconfig import default_api_client, in_cluster, kubeconfig_paths
from resourceslice._plain import owner_ref, to_plain_pools
from resourceslice.api import DriverResources, Owner, Pool, Slice, Stats

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from resourceslice import _core as core
    from resourceslice import metrics
    from resourceslice._core import Desired, Plan, SliceRecord
    from resourceslice.controller import Controller
    from resourceslice.leaderelection import LeaderElection
else:
    from resourceslice._backend import core

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

#: The controller's default; the same budget makes ``plan`` pack exactly as ``publish`` does.
MAX_SLICE_BYTES = 1 << 20

#: In a pool name, replaced by ``--node``.
NODE_PLACEHOLDER = "{node}"

#: The namespace of a Pod's service account: the Lease's, when none is given in-cluster.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

_POOL_KEYS = ("allNodes", "devices", "generation", "nodeSelector", "slices")
_SLICE_KEYS = ("devices", "perDeviceNodeSelection", "sharedCounters")
_TEMPLATE_KEYS = ("device", "foreach")

_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YamlDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class UserError(Exception):
    """Something the user can fix (arguments, FILE, kubeconfig): printed as is, no traceback."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


# -- FILE -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """Where the slices are available: a node, every node, or a node selector."""

    node: str | None = None
    all_nodes: bool = False
    node_selector: dict[str, Any] | None = None


@dataclass(frozen=True)
class Loaded:
    """A FILE that passed validation: what the controller is given, and the core's view of it."""

    resources: DriverResources
    desired: Desired


def read_document(path: Path) -> Any:
    """The parsed FILE: JSON for ``*.json``, YAML otherwise; errors name the path and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(f"{path}: {reason}") from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    try:
        return yaml.load(text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: {_yaml_problem(exc)}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return str(problem)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _unknown_keys(value: Mapping[str, Any], allowed: Sequence[str], path: str) -> list[str]:
    return [
        f"{path}: unknown field {key!r} (expected one of {', '.join(allowed)})"
        for key in value
        if key not in allowed
    ]


def _template_fields(text: str, path: str, names: Sequence[str]) -> list[str]:
    """Problems with the ``{placeholders}`` of one template string (plain names only)."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        return [f"{path}: {exc}"]
    return [
        f"{path}: unknown placeholder {{{name}}} (foreach defines {', '.join(names)})"
        for _, name, _, _ in parsed
        if name is not None and name not in names
    ]


def _fill(template: Any, values: Mapping[str, Any]) -> Any:
    """``template`` with every string formatted with ``values``.

    A string that is exactly one ``{name}`` becomes the value itself, so ``int: "{port}"``
    gives an int, as the API wants.
    """
    if isinstance(template, str):
        whole = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", template)
        if whole:
            return values[whole.group(1)]
        return template.format(**values)
    if isinstance(template, Mapping):
        return {key: _fill(item, values) for key, item in template.items()}
    if isinstance(template, list):
        return [_fill(item, values) for item in template]
    return template


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f'{path}["{key}"]')
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def _expand_template(entry: Mapping[str, Any], path: str, errors: list[str]) -> list[Any]:
    """The devices of one ``{foreach: {var: count | [values]}, device: {...}}`` entry.

    The compact form for big regular pools (ports of a switch fabric...): the cartesian
    product of the variables, the last one varying fastest.
    """
    problems = _unknown_keys(entry, _TEMPLATE_KEYS, path)
    ranges = entry.get("foreach")
    device = entry.get("device")
    if not isinstance(ranges, Mapping) or not ranges:
        problems.append(f"{path}.foreach: must map variable names to a count or a list")
    if not isinstance(device, Mapping):
        problems.append(f"{path}.device: must be an object (the device template)")
    if problems:
        errors += problems
        return []
    assert isinstance(ranges, Mapping) and isinstance(device, Mapping)
    axes: list[list[Any]] = []
    for name, spec in ranges.items():
        if not isinstance(name, str) or not name.isidentifier():
            problems.append(f"{path}.foreach: {name!r} is not a variable name")
        elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
            axes.append(list(range(spec)))
        elif isinstance(spec, list):
            axes.append(spec)
        else:
            problems.append(f"{path}.foreach.{name}: must be a count (int >= 0) or a list")
    names = [str(name) for name in ranges]
    for where, text in _strings(device, f"{path}.device"):
        problems += _template_fields(text, where, names)
    if problems:
        errors += problems
        return []
    try:
        return [_fill(device, dict(zip(names, combo))) for combo in itertools.product(*axes)]
    except (ValueError, TypeError) as exc:  # a format spec that does not suit a value
        errors.append(f"{path}.device: {exc}")
        return []


def _devices(value: Any, path: str, errors: list[str]) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        errors.append(f"{path}: must be a list")
        return None
    devices: list[Any] = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping) and "foreach" in item:
            devices += _expand_template(item, f"{path}[{i}]", errors)
        else:
            devices.append(item)
    return devices


def _slice(value: Any, path: str, errors: list[str]) -> Slice | None:
    if not isinstance(value, Mapping):
        errors.append(f"{path}: must be an object")
        return None
    errors += _unknown_keys(value, _SLICE_KEYS, path)
    return Slice(
        devices=_devices(value.get("devices"), f"{path}.devices", errors) or [],
        shared_counters=value.get("sharedCounters"),
        per_device_node_selection=value.get("perDeviceNodeSelection"),
    )


def _pool(value: Any, path: str, selection: Selection, errors: list[str]) -> Pool | None:
    if not isinstance(value, Mapping):
        errors.append(f"{path}: must be an object with devices or slices")
        return None
    errors += _unknown_keys(value, _POOL_KEYS, path)
    all_nodes = value.get("allNodes", False)
    generation = value.get("generation", 0)
    if not isinstance(all_nodes, bool):
        errors.append(f"{path}.allNodes: must be a boolean")
    if not isinstance(generation, int) or isinstance(generation, bool):
        errors.append(f"{path}.generation: must be an integer")
    slices: list[Slice] | None = None
    if value.get("slices") is not None:
        if isinstance(value["slices"], list):
            built = [
                _slice(s, f"{path}.slices[{i}]", errors) for i, s in enumerate(value["slices"])
            ]
            slices = [s for s in built if s is not None]
        else:
            errors.append(f"{path}.slices: must be a list")
    node_selector = value.get("nodeSelector")
    # The command line's selection is the default; a pool that says where it is wins.
    if node_selector is None and not all_nodes:
        node_selector, all_nodes = selection.node_selector, selection.all_nodes
    return Pool(
        devices=_devices(value.get("devices"), f"{path}.devices", errors),
        slices=slices,
        node_selector=node_selector,
        all_nodes=all_nodes is True,
        generation=generation if isinstance(generation, int) else 0,
    )


def parse_resources(document: Any, selection: Selection) -> tuple[DriverResources, list[str]]:
    """``{pools: {name: {devices | slices, ...}}}`` as DriverResources, and the problems found."""
    if not isinstance(document, Mapping) or not isinstance(document.get("pools"), Mapping):
        return DriverResources(), ["the top level must be an object with a `pools` mapping"]
    errors = _unknown_keys(document, ("pools",), "the top level")
    pools: dict[str, Pool] = {}
    for name, value in document["pools"].items():
        path = f'pools["{name}"]'
        if not isinstance(name, str):
            errors.append(f"{path}: a pool name must be a string")
            continue
        if NODE_PLACEHOLDER in name:
            # A pool name is unique per driver cluster-wide: one file serves every node.
            if selection.node is None:
                errors.append(f"{path}: {NODE_PLACEHOLDER} in a pool name needs --node")
                continue
            name = name.replace(NODE_PLACEHOLDER, selection.node)
        pool = _pool(value, path, selection, errors)
        if pool is not None:
            pools[name] = pool
    return DriverResources(pools=pools), errors


def load(path: Path, driver: str, selection: Selection) -> Loaded:
    """Read and validate FILE for ``driver``; UserError listing every problem with its path."""
    resources, errors = parse_resources(read_document(path), selection)
    if not errors:
        plain, errors = to_plain_pools(resources, selection.node)
        if not errors:
            desired, errors = core.prepare_desired(driver, plain, MAX_SLICE_BYTES)
            if desired is not None:
                return Loaded(resources, desired)
    shown = errors[:50]
    more = f"\n  … and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
    raise UserError(f"{path}: invalid:\n  " + "\n  ".join(shown) + more)


_SELECTOR_TERM = re.compile(r"(?P<not>!)?(?P<key>[^\s=!]+)(?:\s*(?P<op>==|=|!=)\s*(?P<value>\S*))?")
_OPERATORS = {"=": "In", "==": "In", "!=": "NotIn"}


def parse_node_selector(text: str) -> dict[str, Any]:
    """``key=value,key!=value,key,!key`` (kubectl's label selector syntax) as a NodeSelector."""
    expressions: list[dict[str, Any]] = []
    for term in text.split(","):
        match = _SELECTOR_TERM.fullmatch(term.strip())
        if match is None or (match["not"] and match["op"]):
            raise UserError(f"--node-selector: cannot parse {term.strip()!r}")
        if match["op"]:
            expr = {"key": match["key"], "operator": _OPERATORS[match["op"]]}
            expr["values"] = [match["value"]]
        else:
            expr = {"key": match["key"], "operator": "DoesNotExist" if match["not"] else "Exists"}
        expressions.append(expr)
    return {"nodeSelectorTerms": [{"matchExpressions": expressions}]}


# -- plan -------------------------------------------------------------------------------------


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass
class Totals:
    pools: int = 0
    slices: int = 0
    devices: int = 0

    def __str__(self) -> str:
        return ", ".join(
            [
                _counted(self.pools, "pool"),
                _counted(self.slices, "slice"),
                _counted(self.devices, "device"),
            ]
        )


def first_plans(loaded: Loaded, node: str | None) -> list[Plan]:
    """Each pool's plan against an empty cluster: what a first publish creates."""
    owner = ("v1", "Node", node, "") if node else None
    return [core.plan_pool(loaded.desired, p, [], owner, node) for p in loaded.desired.pool_names()]


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


def cmd_plan(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    loaded = load(args.file, args.driver, selection_of(args))
    plans = first_plans(loaded, args.node)
    objects = [json.loads(body) for plan in plans for body in plan.creates]
    out.write(render(objects, args.output))
    err.write(f"{totals_of(plans)} (dry run: nothing was sent)\n")
    return EXIT_OK


# -- cluster access ---------------------------------------------------------------------------


def api_client(kubeconfig: str | None, context: str | None) -> ApiClient:
    from kubernetes.config.config_exception import ConfigException

    paths = kubeconfig_paths(kubeconfig)
    if paths is None and not in_cluster():
        raise UserError(
            "no kubeconfig: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, "
            "or run in a Pod (in-cluster config)"
        )
    try:
        return default_api_client(paths, context)
    except (ConfigException, OSError) as exc:
        raise UserError(f"kubeconfig {paths or '(in-cluster)'}: {exc}") from None


def describe_api_error(exc: BaseException) -> str:
    """One line for an API error: the status and the apiserver's own message."""
    from kubernetes.client.exceptions import ApiException

    if not isinstance(exc, ApiException):
        return f"{type(exc).__name__}: {exc}"
    message = exc.reason or ""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        message = json.loads(exc.body or "")["message"]
    return f"{exc.status} {message}".strip()


def list_records(client: ApiClient, selector: str) -> list[SliceRecord]:
    from resourceslice._apiversion import ResourceSliceAPI

    return core.decode_list(ResourceSliceAPI(client).list(selector))[1]


# -- status -----------------------------------------------------------------------------------


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

    @property
    def state(self) -> str:
        if self.problems:
            return "; ".join(self.problems)
        return "ok" if not self.obsolete else f"ok ({_counted(self.obsolete, 'obsolete slice')})"


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
        problems.append(f"{_counted(len(duplicates), 'device')} in more than one slice: {shown}")
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


def cmd_status(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    from resourceslice.informer import field_selector

    client = api_client(args.kubeconfig, args.context)
    with client:
        records = list_records(client, field_selector(args.driver, args.node, args.node is None))
    where = f" on node {args.node}" if args.node else ""
    if not records:
        out.write(f"no ResourceSlices of driver {args.driver}{where}\n")
        return EXIT_OK
    statuses = pool_statuses(records)
    out.write(status_table(statuses))
    bad = [s.pool for s in statuses if not s.ok]
    if bad:
        err.write(f"{_counted(len(bad), 'pool')} not usable by the scheduler: {', '.join(bad)}\n")
        return EXIT_FAILED
    return EXIT_OK


# -- publish ----------------------------------------------------------------------------------


def _writes(stats: Stats) -> int:
    return stats.creates + stats.updates + stats.deletes


def _delta(before: Stats, after: Stats) -> str:
    return ", ".join(
        [
            _counted(after.creates - before.creates, "create"),
            _counted(after.updates - before.updates, "update"),
            _counted(after.deletes - before.deletes, "delete"),
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
        self.err.write(f"error: {message}: {describe_api_error(exc)}\n")
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
            owner = self._owner(client)
            planned = self._planned_writes(client, loaded, owner)
            self.say(
                f"publishing {args.file} for driver {args.driver}"
                + (f" on node {args.node}" if args.node else "")
                + f": {totals_of(first_plans(loaded, args.node))}; "
                + f"{_counted(planned, 'write')} needed"
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
                f"--metrics-address needs {exc.name}: pip install 'resourceslice[metrics]'"
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

    def _owner(self, client: ApiClient) -> Owner | None:
        """The Node owner with its uid, so the writes can be counted before they are made."""
        if not self.args.node:
            return None
        from kubernetes.client.exceptions import ApiException

        from resourceslice._http import node_uid

        try:
            uid = node_uid(client, self.args.node)
        except ApiException as exc:
            raise UserError(
                f"node {self.args.node}: {describe_api_error(exc)} "
                "(the Node owns the slices, so it must exist)",
                EXIT_FAILED,
            ) from None
        return Owner(api_version="v1", kind="Node", name=self.args.node, uid=uid)

    def _planned_writes(self, client: ApiClient, loaded: Loaded, owner: Owner | None) -> int:
        """What the controller will write, planned as it plans: for the progress display."""
        from resourceslice.informer import field_selector

        by_pool: dict[str, list[SliceRecord]] = {}
        for record in list_records(client, field_selector(self.args.driver, self.args.node, False)):
            by_pool.setdefault(record.pool, []).append(record)
        total = 0
        for pool in sorted(set(by_pool) | set(loaded.desired.pool_names())):
            plan = core.plan_pool(
                loaded.desired, pool, by_pool.get(pool, []), owner_ref(owner), self.args.node
            )
            total += len(plan.deletes) + len(plan.updates) + len(plan.creates)
        return total

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
                except UserError as exc:
                    self.err.write(f"error: {exc}\n  keeping the last good state\n")
                    self.err.flush()
                    continue
                self.say(f"{args.file} changed: {totals_of(first_plans(loaded, args.node))}")
                before = controller.stats()
                controller.update(loaded.resources)
                if controller.is_leader():
                    self._wait(controller, before, 0, args.timeout)
                last = controller.stats()
            stats = controller.stats()
            if _writes(stats) != _writes(last):
                # Someone else changed or deleted our slices; the controller put them back.
                self.say(f"cluster drift repaired: {_delta(last, stats)}")
                last = stats
        self.say("stopping (the slices stay as they are)")


def cmd_publish(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    publisher = Publisher(args, out, err)

    def interrupted(signum: int, frame: FrameType | None) -> None:
        publisher.stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, interrupted)
        signal.signal(signal.SIGTERM, interrupted)
    return publisher.run()


# -- prune ------------------------------------------------------------------------------------

#: Rounds of list-and-delete: a slice changed between the list and its delete is listed again.
_PRUNE_ROUNDS = 3


def cmd_prune(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Delete the driver's slices (of one node with ``--node``): for an uninstall, once the
    driver is stopped (a running one publishes them again). Without ``--yes``, only lists."""
    from kubernetes.client.exceptions import ApiException

    from resourceslice._apiversion import ResourceSliceAPI
    from resourceslice.informer import field_selector

    where = f" on node {args.node}" if args.node else ""
    selector = field_selector(args.driver, args.node, args.node is None)
    client = api_client(args.kubeconfig, args.context)
    with client:
        records = list_records(client, selector)
        if not args.yes:
            if records:
                out.write("".join(f"{r.name}  pool {r.pool}\n" for r in records))
            err.write(
                f"{_counted(len(records), 'ResourceSlice')} of driver {args.driver}{where}; "
                "nothing deleted: pass --yes to delete them\n"
            )
            return EXIT_USAGE
        api = ResourceSliceAPI(client)
        deleted = 0
        for _ in range(_PRUNE_ROUNDS):
            for record in records:
                try:
                    # Preconditions: what was listed, not a slice recreated meanwhile.
                    api.delete(record.name, record.uid, record.resource_version)
                    deleted += 1
                except ApiException as exc:
                    if exc.status not in (404, 409):  # 404: gone; 409: changed, listed again
                        raise
            records = list_records(client, selector)
            if not records:
                break
    out.write(f"deleted {_counted(deleted, 'ResourceSlice')} of driver {args.driver}{where}\n")
    if records:
        err.write(
            f"error: {_counted(len(records), 'ResourceSlice')} came back while deleting: "
            "is the driver still running?\n"
        )
        return EXIT_FAILED
    return EXIT_OK


# -- command line -----------------------------------------------------------------------------


def selection_of(args: argparse.Namespace) -> Selection:
    selector = parse_node_selector(args.node_selector) if args.node_selector else None
    return Selection(node=args.node, all_nodes=args.all_nodes, node_selector=selector)


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

    cluster = argparse.ArgumentParser(add_help=False)
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
        "plan", help="print the ResourceSlices FILE becomes, without a cluster"
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
    status.set_defaults(run=cmd_status)

    prune = commands.add_parser(
        "prune", parents=[cluster], help="delete the driver's ResourceSlices (on uninstall)"
    )
    driver_args(prune)
    prune.add_argument("--node", help="only the slices of this node")
    prune.add_argument("--yes", action="store_true", help="delete (without it: only list)")
    prune.set_defaults(run=cmd_prune)
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
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        if not isinstance(exc, (ApiException, HTTPError, OSError)):
            raise
        print(f"resourceslice: {describe_api_error(exc)}", file=sys.stderr)
        return EXIT_FAILED
    return code


if __name__ == "__main__":
    sys.exit(main())
