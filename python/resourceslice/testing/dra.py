"""A DRA cluster for tests, made of Kubernetes' own code: a Pod gets its devices end to end.

Besides the test apiserver, :class:`DRACluster` runs one Go program (``dracluster/``, pinned
to the apiserver's release and built once per machine like it) holding:

- **kube-scheduler** with its default profile: its DynamicResources plugin allocates a pod's
  claims from the ResourceSlices the driver publishes;
- **the resourceclaim controller** of kube-controller-manager: claims from
  ResourceClaimTemplates, and deallocation once no pod uses a claim;
- **the device-taint eviction controller** of kube-controller-manager (1.33 and newer): the
  pods whose claims use a device with a ``NoExecute`` taint they do not tolerate, from a
  ResourceSlice or a DeviceTaintRule, are deleted;
- **simulated nodes**: a Node object each, and kubelet's plugin manager and DRA manager,
  which register the driver's kubelet plugin and call ``NodePrepareResources`` when a pod is
  bound to the node and ``NodeUnprepareResources`` when it is deleted (kubelet's checkpoint
  included), and read the driver's health stream into the pods' status (1.34 and newer);
- **CDI as container runtimes apply it**: each container's CDI device IDs resolved in the
  node's CDI directory with the CDI library and injected into an OCI spec;
- **a container runtime** where runc can run (:func:`~resourceslice.testing.runtime.
  runtime_available`): each container of a prepared pod runs with runc
  (:mod:`resourceslice.testing.runtime`) from the OCI spec containerd would make (a base
  spec, the container's arguments and literal environment, its CDI devices injected), as a
  static program that reports what it sees (``PreparedPod.containers[name].process``). A
  container that cannot start fails the pod as kubelet's ``CreateContainerError``; a deleted
  pod's containers get SIGTERM (SIGKILL after its grace period) before its claims are
  unprepared. Where runc cannot run, the edits are computed and nothing runs
  (``start_dra_cluster(containers=True)`` requires it instead).

Images, networking (CNI) and the rest of kubelet's pod sync are not simulated. A driver
test::

    with running_dra_cluster() as cluster:           # or the ``dra_cluster`` pytest fixture
        node = cluster.add_node("node-1", labels={"gpu": "true"})
        helper = my_driver.start(cluster.api_client(), node.name,
                                 registrar_dir=str(node.registry_dir),
                                 plugin_data_dir=str(node.plugin_data_dir(DRIVER)),
                                 cdi_dir=str(node.cdi_dir))
        cluster.wait_registered(node.name, DRIVER)
        cluster.create_device_class("gpu", driver=DRIVER)
        cluster.create_claim_template("one-gpu", device_class="gpu")
        cluster.create_pod("pod-1", claim_template="one-gpu")
        pod = cluster.wait_pod_prepared("pod-1")        # or PodNotPrepared saying why
        assert "GPU=0" in pod.containers["ctr"].env     # the edits the runtime applied
        assert pod.containers["ctr"].process.report.env["GPU"] == "0"   # what the process saw
        cluster.delete_pod("pod-1")                      # released, its claim deallocated
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from resourceslice._apiversion import ServedVersion
from resourceslice._http import get_json, send_json
from resourceslice._kubeclient import ClosingApiClient
from resourceslice.testing._jsonlines import Event, JsonLinesProcess
from resourceslice.testing.cluster import (
    DEFAULT_RELEASE,
    ClusterError,
    TestCluster,
    build_go_binary,
    module_files,
    start_cluster,
)
from resourceslice.testing.polling import wait_until
from resourceslice.testing.runtime import (
    REPORTER_PATH,
    Report,
    RuncError,
    base_spec,
    build_reporter,
    build_runc,
    runtime_available,
)

_log = logging.getLogger(__name__)

#: runc's ``--root`` of a node's runtime, under the node's directory (``dracluster/``'s
#: ``addNode`` makes it).
_RUNC_STATE = "runtime/state"

_PACKAGE_DIR = Path(__file__).resolve().parent

#: The namespace pods and claims go to unless told otherwise.
DEFAULT_NAMESPACE = "default"


def build_dra_cluster(*, release: str = DEFAULT_RELEASE, quiet: bool = False) -> Path:
    """The dracluster binary of ``release`` (kube-scheduler, the claim controller, kubelet's
    DRA manager, all of that release), built once per machine and cached as the test
    apiserver. ``RESOURCESLICE_DRACLUSTER_BIN`` (a prebuilt binary) stands for the default
    release only.

    What differs between releases' Go APIs is in ``dracluster/release_<x>_<y>.go``, chosen by
    the build tag ``k8s<x><y>`` (none for the default release).
    """
    prebuilt = os.environ.get("RESOURCESLICE_DRACLUSTER_BIN")
    if prebuilt and release == DEFAULT_RELEASE:
        if not os.access(prebuilt, os.X_OK):
            raise ClusterError(f"RESOURCESLICE_DRACLUSTER_BIN={prebuilt} is not executable")
        return Path(prebuilt)
    src = _PACKAGE_DIR / "dracluster"
    gomod, gosum = module_files(release, src)
    default = release == DEFAULT_RELEASE
    return build_go_binary(
        src,
        binary="dracluster",
        cache_name="dracluster" if default else f"dracluster-{release}",
        what=f"the DRA cluster {release} (kube-scheduler, resourceclaim controller, "
        "kubelet's DRA manager)",
        gomod=gomod,
        gosum=gosum,
        tags=release_tags(release),
        quiet=quiet,
    )


def release_tags(release: str) -> tuple[str, ...]:
    """The Go build tags of ``release``'s DRA cluster: ``k8s<x><y>``, none for the default
    release (whose ``release_*.go`` is built when no other release's tag is given)."""
    return () if release == DEFAULT_RELEASE else (f"k8s{release.replace('.', '')}",)


@dataclass(frozen=True)
class SimulatedNode:
    """A node of the cluster: its name and the kubelet directories a driver's plugin uses."""

    name: str
    #: kubelet's plugin registration directory (``/var/lib/kubelet/plugins_registry``).
    registry_dir: Path
    #: kubelet's plugins directory (``/var/lib/kubelet/plugins``).
    plugins_dir: Path
    #: The container runtime's CDI spec directory (``/var/run/cdi``).
    cdi_dir: Path
    #: kubelet's DRA manager checkpoint directory.
    state_dir: Path

    def plugin_data_dir(self, driver: str) -> Path:
        """Where ``driver``'s plugin keeps its socket and state (``plugins/<driver>``)."""
        return self.plugins_dir / driver

    def empty_cdi_dir(self) -> None:
        """Remove everything in the CDI directory, as a reboot empties ``/var/run/cdi`` (a
        tmpfs)."""
        for entry in self.cdi_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


@dataclass(frozen=True)
class ContainerProcess:
    """A container's process, run by runc: what it printed first, which says what it saw."""

    #: runc's container ID (the pod status's ``containerID`` is ``runc://<id>``).
    id: str
    #: The process's ID, as this machine sees it.
    pid: int
    #: The line the process printed (the reporter's JSON report).
    output: str

    @property
    def report(self) -> Report:
        """What the process saw: its environment, mounts, device nodes and named files."""
        return Report.from_json(json.loads(self.output))


@dataclass(frozen=True)
class ContainerEdits:
    """What the container runtime applied to one container from its CDI devices."""

    #: The CDI device IDs kubelet gave the runtime (from the DRA manager's GetResources).
    cdi_devices: list[str]
    #: ``NAME=value`` entries of the OCI spec's process environment.
    env: list[str]
    #: OCI mounts (``destination``, ``source``, ``type``, ``options``).
    mounts: list[dict[str, Any]]
    #: OCI Linux device nodes (``path``, ``type``, ``major``, ``minor``...).
    device_nodes: list[dict[str, Any]]
    #: OCI hooks, or None.
    hooks: dict[str, Any] | None
    #: The container's process when it runs (the cluster runs containers, and this is not an
    #: init container), else None. Not compared: equal edits are equal whatever ran them.
    process: ContainerProcess | None = field(default=None, compare=False)

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> ContainerEdits:
        process = report.get("process")
        return cls(
            cdi_devices=list(report["cdiDevices"]),
            env=list(report["env"]),
            mounts=list(report["mounts"]),
            device_nodes=list(report["deviceNodes"]),
            hooks=report.get("hooks"),
            process=ContainerProcess(process["id"], process["pid"], process["output"])
            if process
            else None,
        )


@dataclass(frozen=True)
class PreparedPod:
    """A pod whose claims kubelet prepared, and what each container was given."""

    namespace: str
    name: str
    uid: str
    node: str
    containers: dict[str, ContainerEdits]
    #: When the runtime had the edits (Unix seconds, from the node's clock: this machine's).
    prepared_at: float
    #: The pod's ResourceClaims when it was prepared: name -> uid.
    claims: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Eviction:
    """A pod deleted by the device-taint eviction controller, and what followed."""

    namespace: str
    name: str
    uid: str
    #: The message of the pod's ``DisruptionTarget`` condition, which the controller set.
    message: str
    #: When the node had unprepared the pod's claims (Unix seconds): the device is free.
    unprepared_at: float


class PodNotPrepared(AssertionError):
    """A pod was not prepared in time; ``reason`` says why, as a user would find it: the
    scheduler's condition, the error kubelet reported for the driver's prepare, or the
    runtime's error for a container that did not start (``CreateContainerError: ...``)."""

    def __init__(self, pod: str, reason: str) -> None:
        super().__init__(f"pod {pod} was not prepared: {reason}")
        self.reason = reason


def _reserved_for(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Whether the claim's ``reservedFor`` names the pod."""
    consumers = (claim.get("status") or {}).get("reservedFor") or []
    return any(c.get("uid") == pod_uid for c in consumers)


def _pod_key(event: Event) -> tuple[str, str, str]:
    pod = event["pod"]
    return (pod["namespace"], pod["name"], pod["uid"])


class DRACluster:
    """The test apiserver plus kube-scheduler, the resourceclaim controller and simulated
    nodes; see the module's documentation. Made by :func:`start_dra_cluster`."""

    def __init__(
        self,
        apiserver: TestCluster,
        process: JsonLinesProcess,
        node_root: Path,
        max_nodes: int | None = None,
        device_taint_eviction: bool = False,
        why_no_containers: str | None = "not asked for",
    ) -> None:
        self.apiserver = apiserver
        #: How many nodes :meth:`add_node` can add (None: no limit). Kubelet 1.32 and 1.33
        #: keep their DRA plugins in a process-wide registry, so their clusters have one.
        self.max_nodes = max_nodes
        #: Whether the device-taint eviction controller runs: 1.33 and newer (1.32 has no
        #: device taints).
        self.device_taint_eviction = device_taint_eviction
        #: Why the nodes do not run their pods' containers, or None when they do (runc).
        self.why_no_containers = why_no_containers
        self._process = process
        self._node_root = node_root
        self._client = apiserver.api_client("admin")
        self.nodes: dict[str, SimulatedNode] = {}
        self._namespaces: set[str] = set()
        #: The resource.k8s.io version objects are created and read in: the newest the
        #: apiserver serves (v1; v1beta2 on 1.33, v1beta1 on 1.32), as drivers would.
        self.resource_api = ServedVersion(self._client).current().api_version
        self._resource = f"/apis/{self.resource_api}"

    @property
    def release(self) -> str:
        return self.apiserver.release

    def api_client(self, user: str = "admin") -> ClosingApiClient:
        """A new client of the apiserver authenticated as ``user``."""
        return self.apiserver.api_client(user)

    def events(self, kind: str | None = None) -> list[Event]:
        """What the nodes reported so far: ``register``, ``deregister``, ``prepared``,
        ``prepareFailed``, ``unprepared``, ``unprepareFailed``, ``health`` (each with its
        ``node``)."""
        return self._process.events(kind)

    # --- nodes ---------------------------------------------------------------------------

    def add_node(self, name: str, labels: Mapping[str, str] | None = None) -> SimulatedNode:
        """A Node object (ready, schedulable, with ``labels``) and its simulated kubelet."""
        answer = self._process.call({"op": "addNode", "node": name, "labels": dict(labels or {})})
        if answer.get("error"):
            raise ClusterError(f"node {name}: {answer['error']}")
        dirs = answer["dirs"]
        node = SimulatedNode(
            name=name,
            registry_dir=Path(dirs["registry"]),
            plugins_dir=Path(dirs["plugins"]),
            cdi_dir=Path(dirs["cdi"]),
            state_dir=Path(dirs["state"]),
        )
        self.nodes[name] = node
        return node

    def wait_registered(
        self, node: str, driver: str, *, after: int = 0, timeout: float = 60.0
    ) -> Event:
        """kubelet of ``node`` registered ``driver``'s plugin, among the events from index
        ``after`` on (``len(events())`` taken before a plugin restart)."""
        return self._process.wait_event(
            lambda e: (
                e.get("event") == "register"
                and e.get("node") == node
                and e.get("driver") == driver
                and not e.get("error")
            ),
            after=after,
            timeout=timeout,
        )

    def stop_kubelet(self, node: str) -> None:
        """Stop ``node``'s kubelet (its DRA manager, plugin manager and pod worker), as
        ``systemctl stop kubelet`` does; the Node object stays, and so do kubelet's directories:
        its checkpoint in ``state_dir``, the plugins' sockets. Pods bound meanwhile wait, and
        nothing is unprepared."""
        self._kubelet_op("stopKubelet", node)

    def start_kubelet(self, node: str) -> None:
        """Start ``node``'s kubelet again, as after a restart or a reboot: a new DRA manager
        reads kubelet's checkpoint, the plugin manager registers the plugins whose sockets it
        finds, and every pod bound to the node is prepared again (``wait_pod_prepared(...,
        after=)`` waits for that); pods gone meanwhile are unprepared by the DRA manager's
        reconcile loop (kubelet's: within a minute). Kubelet 1.34 and newer only (older ones
        keep their plugins in a process-wide registry)."""
        self._kubelet_op("startKubelet", node)

    def _kubelet_op(self, op: str, node: str) -> None:
        answer = self._process.call({"op": op, "node": node})
        if answer.get("error"):
            raise ClusterError(f"node {node}: {answer['error']}")

    def wait_deregistered(
        self, node: str, driver: str, *, after: int = 0, timeout: float = 60.0
    ) -> Event:
        """kubelet of ``node`` took ``driver``'s plugin out (its socket went away)."""
        return self._process.wait_event(
            lambda e: (
                e.get("event") == "deregister"
                and e.get("node") == node
                and e.get("driver") == driver
            ),
            after=after,
            timeout=timeout,
        )

    # --- objects -------------------------------------------------------------------------

    def _ensure_namespace(self, namespace: str) -> None:
        """The namespace and its ``default`` ServiceAccount (pods need it; the controller
        that makes it is not running)."""
        if namespace in self._namespaces:
            return
        objects = [
            ("/api/v1/namespaces", {"metadata": {"name": namespace}}),
            (
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"metadata": {"name": "default"}},
            ),
        ]
        for path, body in objects:
            try:
                send_json(self._client, "POST", path, json.dumps(body).encode())
            except ApiException as exc:
                if exc.status != 409:
                    raise
        self._namespaces.add(namespace)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` (a collection of the API) and return what was stored."""
        created: dict[str, Any] = json.loads(
            send_json(self._client, "POST", path, json.dumps(body).encode())
        )
        return created

    def create_device_class(
        self,
        name: str,
        *,
        driver: str | None = None,
        selectors: Sequence[str] = (),
        config: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """A DeviceClass selecting ``driver``'s devices, and those matching each CEL
        expression of ``selectors`` (``device.attributes["x"].model == "a"``)."""
        expressions = [f'device.driver == "{driver}"'] if driver else []
        expressions += list(selectors)
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
        if config:
            spec["config"] = list(config)
        return self.create(
            f"{self._resource}/deviceclasses", {"metadata": {"name": name}, "spec": spec}
        )

    def _create_in(
        self, namespace: str, resource: str, name: str, spec: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A resource.k8s.io object ``name`` of ``resource`` in ``namespace`` (made if new)."""
        self._ensure_namespace(namespace)
        path = f"{self._resource}/namespaces/{namespace}/{resource}"
        return self.create(path, {"metadata": {"name": name}, "spec": spec})

    def _claim_spec(
        self,
        device_class: str,
        count: int,
        selectors: Sequence[str],
        request: str,
        tolerations: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
        if selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        if tolerations:
            exactly["tolerations"] = [dict(t) for t in tolerations]
        # v1beta1 has the request's fields inline; v1beta2 and v1 under "exactly".
        if self.resource_api.endswith("/v1beta1"):
            return {"devices": {"requests": [{"name": request, **exactly}]}}
        return {"devices": {"requests": [{"name": request, "exactly": exactly}]}}

    def create_claim_template(
        self,
        name: str,
        *,
        device_class: str,
        count: int = 1,
        selectors: Sequence[str] = (),
        request: str = "req",
        namespace: str = DEFAULT_NAMESPACE,
        tolerations: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """A ResourceClaimTemplate asking for ``count`` devices of ``device_class`` in one
        request named ``request``; every pod using it gets a claim of its own.
        ``tolerations``: the request's device tolerations
        (``{"key", "operator": "Exists", "effect": "NoExecute"}``)."""
        spec = self._claim_spec(device_class, count, selectors, request, tolerations)
        return self._create_in(namespace, "resourceclaimtemplates", name, {"spec": spec})

    def create_claim(
        self,
        name: str,
        *,
        device_class: str,
        count: int = 1,
        selectors: Sequence[str] = (),
        request: str = "req",
        namespace: str = DEFAULT_NAMESPACE,
        tolerations: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """A ResourceClaim (pods that name it share its devices)."""
        spec = self._claim_spec(device_class, count, selectors, request, tolerations)
        return self._create_in(namespace, "resourceclaims", name, spec)

    def create_pod(
        self,
        name: str,
        *,
        claim_template: str | None = None,
        claim: str | None = None,
        containers: Sequence[str] = ("ctr",),
        node_selector: Mapping[str, str] | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """A Pod whose ``containers`` all use one claim: made from ``claim_template``, or the
        existing ``claim``. The scheduler places it; the node prepares it.

        ``args`` and ``env``: each container's arguments and environment. Where containers
        run, the arguments are the paths of the files whose contents the process reports
        (``process.report.files``)."""
        if (claim_template is None) == (claim is None):
            raise ValueError("give exactly one of claim_template and claim")
        self._ensure_namespace(namespace)
        pod_claim: dict[str, Any] = {"name": "devices"}
        if claim_template is not None:
            pod_claim["resourceClaimTemplateName"] = claim_template
        else:
            pod_claim["resourceClaimName"] = claim
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": c,
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "devices"}]},
                    **({"args": list(args)} if args else {}),
                    **({"env": [{"name": k, "value": v} for k, v in env.items()]} if env else {}),
                }
                for c in containers
            ],
            "resourceClaims": [pod_claim],
            "terminationGracePeriodSeconds": 30,
        }
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        return self.create(
            f"/api/v1/namespaces/{namespace}/pods", {"metadata": {"name": name}, "spec": spec}
        )

    # --- pods ----------------------------------------------------------------------------

    def get_pod(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any] | None:
        """The pod as stored, or None when there is none."""
        path = f"/api/v1/namespaces/{namespace}/pods/{quote(name, safe='')}"
        try:
            pod: dict[str, Any] = json.loads(get_json(self._client, path))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return pod

    def pod_claims(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
        """The ResourceClaims the pod uses (those made from templates included), as stored;
        a claim not made yet is left out."""
        pod = self.get_pod(name, namespace)
        if pod is None:
            return []
        generated = {
            s["name"]: s.get("resourceClaimName")
            for s in pod.get("status", {}).get("resourceClaimStatuses", [])
        }
        claims = []
        for entry in pod["spec"].get("resourceClaims", []):
            claim_name = entry.get("resourceClaimName") or generated.get(entry["name"])
            if claim_name:
                claim = self._get_claim(claim_name, namespace)
                if claim is not None:
                    claims.append(claim)
        return claims

    def list_claims(self, namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
        """Every ResourceClaim of ``namespace``, as stored."""
        path = f"{self._resource}/namespaces/{namespace}/resourceclaims"
        items: list[dict[str, Any]] = json.loads(get_json(self._client, path))["items"]
        return items

    def _get_claim(self, name: str, namespace: str) -> dict[str, Any] | None:
        path = f"{self._resource}/namespaces/{namespace}/resourceclaims/{quote(name, safe='')}"
        try:
            claim: dict[str, Any] = json.loads(get_json(self._client, path))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return claim

    @property
    def runs_containers(self) -> bool:
        """Whether the nodes run their pods' containers (with runc)."""
        return self.why_no_containers is None

    def why_not_prepared(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> str:
        """Why the pod has no devices yet, where a user would look: the scheduler's
        ``PodScheduled`` condition while it is not placed, else the last error kubelet
        reported for it: its claims' (the ``FailedPrepareDynamicResources`` event) or a
        container's that did not start (``CreateContainerError: <the runtime's error>``),
        else ``"pending"``."""
        pod = self.get_pod(name, namespace)
        if pod is None:
            return "the pod does not exist"
        if not pod["spec"].get("nodeName"):
            for condition in pod.get("status", {}).get("conditions", []):
                if condition["type"] == "PodScheduled" and condition["status"] == "False":
                    return f"{condition.get('reason')}: {condition.get('message')}"
            return "not scheduled yet"
        failures = [
            f"{e['reason']}: {e['error']}" if e.get("event") == "containerFailed" else e["error"]
            for e in self._process.events()
            if e.get("event") in ("prepareFailed", "containerFailed")
            and e["pod"]["uid"] == pod["metadata"]["uid"]
        ]
        return failures[-1] if failures else "pending"

    def wait_pod_prepared(
        self,
        name: str,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        after: int = 0,
        timeout: float = 60.0,
    ) -> PreparedPod:
        """Wait until kubelet prepared the pod's claims and the runtime applied the CDI
        edits; :class:`PodNotPrepared` with the reason if that does not happen in time.
        ``after``: among the events from that index on (``len(events())`` taken before a
        kubelet restart, which prepares the pod again)."""
        pod = self.get_pod(name, namespace)
        if pod is None:
            raise PodNotPrepared(f"{namespace}/{name}", "the pod does not exist")
        uid = pod["metadata"]["uid"]
        try:
            event = self._process.wait_event(
                lambda e: e.get("event") == "prepared" and _pod_key(e) == (namespace, name, uid),
                after=after,
                timeout=timeout,
            )
        except AssertionError as exc:
            reason = self.why_not_prepared(name, namespace)
            raise PodNotPrepared(f"{namespace}/{name}", reason) from exc
        return PreparedPod(
            namespace=namespace,
            name=name,
            uid=uid,
            node=event["node"],
            containers={
                c: ContainerEdits.from_report(report) for c, report in event["containers"].items()
            },
            prepared_at=float(event["at"]),
            claims={
                c["metadata"]["name"]: c["metadata"]["uid"]
                for c in self.pod_claims(name, namespace)
            },
        )

    def wait_prepare_failed(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, *, timeout: float = 60.0
    ) -> str:
        """Wait until kubelet failed to prepare the pod's claims; the error it reported (the
        driver's, or kubelet's own, such as a driver that is not registered)."""
        return self._wait_failure("prepareFailed", name, namespace, None, timeout)

    def _wait_failure(
        self, kind: str, name: str, namespace: str, container: str | None, timeout: float
    ) -> str:
        """The error of the first ``kind`` event of the pod as it is now (of ``container``,
        when given); waits for it."""
        pod = self.get_pod(name, namespace)
        if pod is None:
            raise ClusterError(f"pod {namespace}/{name} does not exist")
        uid = pod["metadata"]["uid"]
        event = self._process.wait_event(
            lambda e: (
                e.get("event") == kind
                and _pod_key(e) == (namespace, name, uid)
                and container in (None, e.get("container"))
            ),
            timeout=timeout,
        )
        return str(event["error"])

    def wait_container_failed(
        self,
        name: str,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        container: str | None = None,
        timeout: float = 60.0,
    ) -> str:
        """Wait until a container of the pod (``container``, or any) failed to start; the
        runtime's error, as kubelet reports it in the container's ``CreateContainerError``
        waiting state and the pod's ``Failed`` event."""
        return self._wait_failure("containerFailed", name, namespace, container, timeout)

    def wait_pod_unschedulable(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, *, timeout: float = 60.0
    ) -> str:
        """Wait until the scheduler reports the pod unschedulable; its message."""

        def message() -> str | None:
            pod = self.get_pod(name, namespace) or {}
            for condition in pod.get("status", {}).get("conditions", []):
                if (
                    condition["type"] == "PodScheduled"
                    and condition["status"] == "False"
                    and condition.get("reason") == "Unschedulable"
                ):
                    return str(condition.get("message", ""))
            return None

        found = wait_until(
            message, timeout, interval=0.1, describe=lambda: self.why_not_prepared(name, namespace)
        )
        return str(found)

    def container_edits(
        self, name: str, container: str = "ctr", namespace: str = DEFAULT_NAMESPACE
    ) -> ContainerEdits:
        """The CDI edits the runtime applies to ``container`` if it starts now (as after a
        container restart): resolved anew from the node's CDI directory; ``process``: the
        container that runs now, and what it saw when it started."""
        pod = self.get_pod(name, namespace)
        if pod is None or not pod["spec"].get("nodeName"):
            raise ClusterError(f"pod {namespace}/{name} is not on a node")
        answer = self._process.call(
            {"op": "inject", "node": pod["spec"]["nodeName"], "namespace": namespace, "pod": name}
        )
        if answer.get("error"):
            raise ClusterError(f"pod {namespace}/{name}: {answer['error']}")
        return ContainerEdits.from_report(answer["containers"][container])

    def report_now(
        self,
        name: str,
        container: str = "ctr",
        namespace: str = DEFAULT_NAMESPACE,
        *,
        files: Sequence[str] = (),
    ) -> Report:
        """What the running ``container`` sees now: the reporter run again inside it (``runc
        exec``, as ``kubectl exec`` does), reading ``files`` — a file replaced on the host
        after the container started, say, which a bind mount may not show."""
        process = self.container_edits(name, container, namespace).process
        if process is None:
            raise ClusterError(f"container {container} of pod {namespace}/{name} does not run")
        pod = self.get_pod(name, namespace) or {}
        state = self._node_root / pod["spec"]["nodeName"] / _RUNC_STATE
        args = ["exec", "--env", "REPORTER_ONCE=1", process.id, REPORTER_PATH, *files]
        done = subprocess.run(
            [str(build_runc(quiet=True)), "--root", str(state), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise RuncError(args, f"exit {done.returncode}", done.stderr)
        return Report.from_json(json.loads(done.stdout.split("\n", 1)[0]))

    def delete_pod(
        self,
        name: str,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        timeout: float = 60.0,
        grace_period: int | None = None,
    ) -> None:
        """Delete the pod (gracefully, as ``kubectl delete [--grace-period]``) and wait for
        what that does to it: its containers stopped (SIGTERM, SIGKILL once ``grace_period``
        or the pod's own has passed), kubelet released its claims, the pod is gone, and no
        claim's ``reservedFor`` names it. A claim no other pod uses is then deallocated
        (deleted, when made from a template), and waited for too; a claim another pod still
        uses stays allocated, and kubelet keeps it prepared for that pod."""
        pod = self.get_pod(name, namespace)
        if pod is None:
            return
        uid = pod["metadata"]["uid"]
        claims = [
            (c["metadata"]["name"], c["metadata"]["uid"], _reserved_for(c, uid))
            for c in self.pod_claims(name, namespace)
        ]
        prepared = any(e["pod"]["uid"] == uid for e in self._process.events("prepared"))
        deadline = time.monotonic() + timeout
        options = {} if grace_period is None else {"gracePeriodSeconds": grace_period}
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        send_json(self._client, "DELETE", path, json.dumps(options).encode())
        if prepared:
            # The node that prepared it says when kubelet released its claims (unprepared
            # them, or only its share of a claim another pod of the node still uses).
            self._process.wait_event(
                lambda e: e.get("event") == "unprepared" and e["pod"]["uid"] == uid,
                timeout=timeout,
            )
        self._wait_released(namespace, name, uid, claims, max(0.0, deadline - time.monotonic()))

    def _released(
        self, namespace: str, name: str, uid: str, claims: Sequence[tuple[str, str, bool]]
    ) -> bool:
        """The pod of ``uid`` is gone, and its ``claims`` (name, uid, whether they were
        reserved for it) are gone or no longer reserved for it; one it held that no other
        consumer holds is deallocated too (the claim controller deallocates a claim as its
        last consumer goes, and only then: one allocated but never reserved stays so)."""
        current = self.get_pod(name, namespace)
        if current is not None and current["metadata"]["uid"] == uid:
            return False
        for claim_name, claim_uid, was_reserved in claims:
            claim = self._get_claim(claim_name, namespace)
            if claim is None or claim["metadata"]["uid"] != claim_uid:
                continue
            if _reserved_for(claim, uid):
                return False
            status = claim.get("status", {})
            if was_reserved and not status.get("reservedFor") and status.get("allocation"):
                return False
        return True

    def _wait_released(
        self,
        namespace: str,
        name: str,
        uid: str,
        claims: Sequence[tuple[str, str, bool]],
        timeout: float,
    ) -> None:
        wait_until(
            lambda: self._released(namespace, name, uid, claims),
            timeout,
            interval=0.1,
            describe=lambda: (
                f"pod {namespace}/{name} or its claims {[c[:2] for c in claims]} not "
                "released; node events: "
                f"{[e for e in self.events() if e.get('pod', {}).get('uid') == uid]}"
            ),
        )

    def pod_events(self, uid: str, namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
        """The Events about the pod of ``uid`` (kept after the pod is gone), oldest first."""
        path = f"/api/v1/namespaces/{namespace}/events"
        query = [("fieldSelector", f"involvedObject.uid={uid}")]
        items: list[dict[str, Any]] = json.loads(get_json(self._client, path, query))["items"]
        return sorted(items, key=lambda e: e.get("firstTimestamp") or e["metadata"]["name"])

    def wait_pod_evicted(self, pod: PreparedPod, *, timeout: float = 60.0) -> Eviction:
        """Wait until the device-taint eviction controller deleted ``pod``, kubelet unprepared
        its claims, the pod is gone and the claims it had when prepared are released as
        :meth:`delete_pod` waits for them (deallocated, or deleted when made from a template,
        unless another pod still uses them).

        The controller's mark is the pod's ``DisruptionTarget`` condition (reason
        ``DeletionByDeviceTaintManager``), which it sets before it deletes the pod and the
        node saw; its Event is not relied on (1.33 records one for its first eviction
        only). A pod that went for another reason is an AssertionError."""
        if not self.device_taint_eviction:
            raise ClusterError(f"Kubernetes {self.release} has no device-taint eviction")

        def why() -> str:
            current = self.get_pod(pod.name, pod.namespace)
            if current is None or current["metadata"]["uid"] != pod.uid:
                state = "the pod is gone"
            else:
                state = f"its conditions: {current.get('status', {}).get('conditions', [])}"
            events = [(e.get("reason"), e.get("message")) for e in self.pod_events(pod.uid)]
            return f"pod {pod.namespace}/{pod.name} not evicted; {state}; its events: {events}"

        try:
            unprepared = self._process.wait_event(
                lambda e: e.get("event") == "unprepared" and e["pod"]["uid"] == pod.uid,
                timeout=timeout,
            )
        except AssertionError as exc:
            raise AssertionError(why()) from exc
        disruption = unprepared.get("disruption") or {}
        if disruption.get("reason") != "DeletionByDeviceTaintManager":
            raise AssertionError(
                f"pod {pod.namespace}/{pod.name} went, but not by device-taint eviction "
                f"(its disruption: {disruption or 'none'})"
            )
        # Prepared, its claims were reserved for it.
        claims = [(claim, claim_uid, True) for claim, claim_uid in sorted(pod.claims.items())]
        self._wait_released(pod.namespace, pod.name, pod.uid, claims, timeout)
        return Eviction(
            namespace=pod.namespace,
            name=pod.name,
            uid=pod.uid,
            message=str(disruption.get("message", "")),
            unprepared_at=float(unprepared["at"]),
        )

    def allocated_resources_status(
        self, name: str, container: str = "ctr", namespace: str = DEFAULT_NAMESPACE
    ) -> dict[str, list[dict[str, Any]]]:
        """The health of the container's devices as kubelet wrote it into the pod's status
        (``allocatedResourcesStatus``): resource name (``claim:<claim>``) -> its devices'
        ``{"resourceID", "health"[, "message"]}``; empty when none is known."""
        pod = self.get_pod(name, namespace) or {}
        for status in pod.get("status", {}).get("containerStatuses") or ():
            if status["name"] == container:
                return {
                    r["name"]: list(r.get("resources") or ())
                    for r in status.get("allocatedResourcesStatus") or ()
                }
        return {}

    # --- life ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the components (the containers with them) and the apiserver, and remove
        their directories."""
        try:
            self._process.close()
            self._client.close()
        finally:
            try:
                if self.runs_containers:
                    _remove_containers(self._node_root)
            finally:
                self.apiserver.close()
                shutil.rmtree(self._node_root, ignore_errors=True)

    def __enter__(self) -> DRACluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remove_containers(node_root: Path) -> None:
    """Kill and delete any container a node's runtime left (the program stops its own; this
    is for one that was killed): runc's state of each node is ``<node>/{_RUNC_STATE}``."""
    runc = build_runc(quiet=True)
    for state in node_root.glob(f"*/{_RUNC_STATE}"):
        listed = subprocess.run(
            [str(runc), "--root", str(state), "list", "--quiet"],
            capture_output=True,
            text=True,
            check=False,
        )
        for container_id in listed.stdout.split():
            subprocess.run(
                [str(runc), "--root", str(state), "delete", "--force", container_id],
                capture_output=True,
                check=False,
            )


def _why_no_containers(containers: bool | None) -> str | None:
    """Why the nodes will run no containers (None: they will); ClusterError when they must
    and cannot."""
    if containers is False:
        return "containers=False"
    why_not = runtime_available()
    if why_not is not None:
        if containers:
            raise ClusterError(f"containers=True, but runc cannot run containers here: {why_not}")
        _log.warning("the DRA cluster's nodes run no containers: %s", why_not)
    return why_not


def _runtime_args(node_root: Path) -> list[str]:
    """The DRA program's flags that have its nodes run containers (runc and the reporter
    built first, when not yet)."""
    spec = node_root / "base-spec.json"
    spec.write_text(json.dumps(base_spec([REPORTER_PATH])))
    return [f"--runc={build_runc()}", f"--reporter={build_reporter()}", f"--base-spec={spec}"]


def start_dra_cluster(
    *,
    retry_period: float = 1.0,
    release: str = DEFAULT_RELEASE,
    apiserver: TestCluster | None = None,
    timeout: float = 180.0,
    binding_timeout: float | None = None,
    containers: bool | None = None,
) -> DRACluster:
    """Start a test apiserver of ``release`` (or use ``apiserver``, which the cluster then
    owns) and the DRA components of the same release against it; ready on return.

    ``containers``: whether the nodes run their pods' containers with runc. None: where runc
    can run (:func:`~resourceslice.testing.runtime.runtime_available`), else not, with a
    warning logged saying why; True: required (:class:`ClusterError` where runc cannot run);
    False: never. :attr:`DRACluster.why_no_containers` says which it is.

    ``retry_period``: how soon a node retries a pod whose prepare failed (kubelet waits 10 s;
    tests want less). ``binding_timeout``: how long kube-scheduler waits for a device's
    binding conditions before it drops the allocation (its ``bindingTimeout``, 600 s by
    default, at least 1 s; releases 1.34 and newer).
    """
    if binding_timeout is not None and (
        binding_timeout < 1 or tuple(map(int, release.split("."))) < (1, 34)
    ):
        raise ValueError(
            f"binding_timeout={binding_timeout}: kube-scheduler takes one of at least 1 s, "
            f"from release 1.34 (this is {release})"
        )
    why_no_containers = _why_no_containers(containers)
    binary = build_dra_cluster(release=release)
    if apiserver is not None and apiserver.release != release:
        raise ClusterError(f"the apiserver is {apiserver.release}'s, the components {release}'s")
    server = apiserver if apiserver is not None else start_cluster(timeout=timeout, release=release)
    node_root = Path(tempfile.mkdtemp(prefix="rs-dra-"))
    try:
        runtime_args = _runtime_args(node_root) if why_no_containers is None else []
        process = JsonLinesProcess(
            [
                str(binary),
                f"--kubeconfig={server.kubeconfigs['admin']}",
                f"--dir={node_root}",
                f"--feature-gates={server.feature_gates}",
                f"--retry-period={retry_period}s",
                f"--binding-timeout={binding_timeout or 0}s",
                *runtime_args,
                "-v=2",
            ],
            log_path=server.data_dir / "dracluster.log",
            what="the DRA cluster",
        )
        try:
            ready = process.wait_event(lambda e: e.get("event") == "ready", timeout=timeout)
        except BaseException:
            process.close()
            raise
    except BaseException:
        server.close()
        shutil.rmtree(node_root, ignore_errors=True)
        raise
    return DRACluster(
        server,
        process,
        node_root,
        max_nodes=ready.get("maxNodes") or None,
        device_taint_eviction=bool(ready.get("deviceTaintEviction")),
        why_no_containers=why_no_containers,
    )


@contextlib.contextmanager
def running_dra_cluster(**kwargs: Any) -> Iterator[DRACluster]:
    """``with running_dra_cluster() as cluster: ...`` — started, then stopped and removed.

    Takes :func:`start_dra_cluster`'s arguments.
    """
    cluster = start_dra_cluster(**kwargs)
    try:
        yield cluster
    finally:
        cluster.close()
