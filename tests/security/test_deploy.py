"""The chart (deploy/chart/resourceslice-driver), rendered by Helm's own code, proven on the
real apiserver: its default render and two variations (tests/chart/renders.py: the central
publisher alone; both halves with a sharded publisher), each applied to an apiserver of its
own.

- Every manifest of a render applies, Namespace first.
- The central publisher runs the Deployment's own command line, and the example kubelet
  driver runs, each with its render's ServiceAccount (a token the apiserver issued for it):
  the apiserver's audit log shows every request they made allowed (no 401, no 403), and every
  verb the render grants them used — nothing granted is spare.
- The ValidatingAdmissionPolicy keeps a node's kubelet plugin to its own node's slices.
- Every workload is least privilege: its pod is admitted by Pod Security Admission enforcing
  "restricted" (the publisher), or needs "privileged" for its host mounts and nothing else
  (the kubelet plugin); images are pinned.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import resourceslice
from chart.renders import RENDERS, find, manifests, roles_of
from resourceslice import DriverResources, Pool, load_resources
from resourceslice._http import get_json, request, send_json
from resourceslice._kubeclient import kubeconfig_client
from resourceslice.testing import TestCluster, start_cluster, wait_until
from resourceslice.testing.kubelet import KubeletHarness
from support.chain import load_example
from support.kubelet_env import allocated_claim, delete_claim, uid

pytestmark = pytest.mark.integration

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
# The renders with each half (tests/chart/test_chart.py checks these against the renders).
WITH_PUBLISHER = ("publisher", "sharded")
WITH_KUBELET_PLUGIN = ("default", "sharded")

# Every request made by a service account, once it completed (or a watch, once it started).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "userGroups": ["system:serviceaccounts"]}, {"level": "None"}],
}


def collection_path(client: kubernetes.client.ApiClient, doc: dict[str, Any]) -> str:
    """Where ``doc`` is created: its resource found by the apiserver's discovery."""
    group_version = doc["apiVersion"]
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    resources = json.loads(get_json(client, base))["resources"]
    [resource] = [r for r in resources if r["kind"] == doc["kind"] and "/" not in r["name"]]
    if resource["namespaced"]:
        return f"{base}/namespaces/{doc['metadata'].get('namespace', 'default')}/{resource['name']}"
    return f"{base}/{resource['name']}"


@pytest.fixture(scope="module")
def render(request: pytest.FixtureRequest) -> str:
    """The name of the render under test (parametrized indirectly: the tests of one render
    run together, on its own apiserver)."""
    return str(request.param)


@pytest.fixture(scope="module")
def docs(render: str) -> list[dict[str, Any]]:
    return manifests(render)


@pytest.fixture(scope="module")
def cluster(render: str) -> Iterator[TestCluster]:
    with start_cluster(audit_policy=AUDIT_POLICY) as started:
        yield started


@pytest.fixture(scope="module")
def admin(cluster: TestCluster) -> Iterator[kubernetes.client.ApiClient]:
    client = cluster.api_client("admin")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def applied(admin: kubernetes.client.ApiClient, docs: list[dict[str, Any]]) -> list[str]:
    """Every manifest of the render created, in Helm's order, as ``helm template ... |
    kubectl apply -f -`` would."""
    created = []
    for doc in docs:
        send_json(admin, "POST", collection_path(admin, doc), json.dumps(doc).encode())
        created.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return created


@pytest.mark.parametrize("render", list(RENDERS), indirect=True)
def test_every_manifest_is_applied(
    render: str, applied: list[str], docs: list[dict[str, Any]]
) -> None:
    """Each object of the render was created, the Namespace first (it is labelled for Pod
    Security); a render with the kubelet plugin has its admission policy and binding."""
    assert applied == [f"{d['kind']}/{d['metadata']['name']}" for d in docs]
    assert applied[0] == f"Namespace/{RENDERS[render].namespace}"
    kinds = {d["kind"] for d in docs}
    policy = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert (policy <= kinds) == ("DaemonSet" in kinds)
    assert ("Deployment" in kinds) == (render in WITH_PUBLISHER)
    assert ("DaemonSet" in kinds) == (render in WITH_KUBELET_PLUGIN)


def token_of(
    admin: kubernetes.client.ApiClient, namespace: str, account: str, pod: dict[str, Any] | None
) -> str:
    """A token the apiserver issues for the account (bound to ``pod``, as kubelet gets one
    for a pod: then it names the pod's node)."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if pod is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        }
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    return str(
        json.loads(send_json(admin, "POST", path, json.dumps(body).encode()))["status"]["token"]
    )


def kubeconfig_for(cluster: TestCluster, token: str, path: Path, namespace: str) -> Path:
    """A kubeconfig of ``token``, its context in ``namespace`` (a Pod's own namespace)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": cluster.server,
                    "certificate-authority": str(cluster.ca_file),
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [
            {"name": "c", "context": {"cluster": "c", "user": "u", "namespace": namespace}}
        ],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def scheduled_pod(
    admin: kubernetes.client.ApiClient, namespace: str, account: str, node: str
) -> dict[str, Any]:
    """A Pod of ``account`` on ``node``, as the scheduler leaves it (no kubelet runs it)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"{account}-", "namespace": namespace},
        "spec": {
            "serviceAccountName": account,
            "nodeName": node,
            "containers": [{"name": "driver", "image": "registry.example.com/driver:latest"}],
        },
    }
    path = f"/api/v1/namespaces/{namespace}/pods"
    pod: dict[str, Any] = json.loads(send_json(admin, "POST", path, json.dumps(body).encode()))
    return pod


def create_node(admin: kubernetes.client.ApiClient, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    send_json(admin, "POST", "/api/v1/nodes", json.dumps(body).encode())


def audited(cluster: TestCluster, user: str) -> list[dict[str, Any]]:
    """The audit events of ``user``'s requests, one per request."""
    events: dict[str, dict[str, Any]] = {}
    for line in cluster.audit_log.read_text().splitlines():
        event = json.loads(line)
        if event["user"]["username"] == user:
            events[event["auditID"]] = event  # the last stage of each request
    return list(events.values())


def used(events: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(verb, group, resource[/subresource]) of the requests for objects (discovery is open
    to everyone)."""
    return {
        (e["verb"], e["objectRef"].get("apiGroup", ""), resource(e["objectRef"]))
        for e in events
        if "objectRef" in e
    }


def resource(ref: dict[str, Any]) -> str:
    return f"{ref['resource']}/{ref['subresource']}" if ref.get("subresource") else ref["resource"]


#: Rules that no request uses by itself: the apiserver checks them within another request.
#: ``resourceclaims/driver`` is checked within a write of ``resourceclaims/status``
#: (test_claim_status_rbac.py shows each is needed).
SYNTHETIC = {("associated-node:patch", "resource.k8s.io", "resourceclaims/driver")}


def granted(*roles: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (verb, group, resource)
        for role in roles
        for rule in role["rules"]
        for verb in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def refused(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("responseStatus", {}).get("code") in (401, 403)]


def slice_devices(admin: kubernetes.client.ApiClient, selector: str) -> dict[str, list[str]]:
    """The devices of each pool the slices hold (names sorted as the driver numbers them)."""
    items = json.loads(get_json(admin, SLICES, [("fieldSelector", selector)]))["items"]
    pools: dict[str, list[str]] = {}
    for item in items:
        pools.setdefault(item["spec"]["pool"]["name"], []).extend(
            d["name"] for d in item["spec"]["devices"]
        )
    return {
        pool: sorted(names, key=lambda n: int(n.rsplit("-", 1)[1])) for pool, names in pools.items()
    }


class Output:
    """A process's output lines, read as they come."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line)

    def close(self, process: subprocess.Popen[str]) -> str:
        """Once ``process`` exited: everything it wrote."""
        self._thread.join(timeout=10)
        assert process.stdout is not None
        process.stdout.close()
        return "".join(self.lines)

    def find(self, pattern: str) -> re.Match[str] | None:
        return next((m for line in self.lines if (m := re.search(pattern, line))), None)


def expected_devices(pools_file: Path) -> dict[str, list[str]]:
    """The devices of each pool of a pool file, as slice_devices() shows them."""
    resources = load_resources(pools_file)
    return {
        name: sorted((d["name"] for d in pool.devices), key=lambda n: int(n.rsplit("-", 1)[1]))
        for name, pool in resources.pools.items()
    }


@pytest.mark.parametrize("render", WITH_PUBLISHER, indirect=True)
@pytest.mark.usefixtures("applied")
def test_the_publisher_deployment_with_its_service_account(
    cluster: TestCluster,
    admin: kubernetes.client.ApiClient,
    docs: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    """The Deployment's command line, run by as many replicas as the Lease Role serves (one,
    or two sharing the shards), with a token of its ServiceAccount: the pools published,
    an edit of the ConfigMap's file published; every verb granted used, none refused."""
    deployment = find(docs, "Deployment")
    namespace = deployment["metadata"]["namespace"]
    pod_spec = deployment["spec"]["template"]["spec"]
    account = pod_spec["serviceAccountName"]
    [container] = pod_spec["containers"]
    [volume] = pod_spec["volumes"]
    config = find(docs, "ConfigMap", volume["configMap"]["name"])
    [(key, pools_text)] = config["data"].items()
    pools = tmp_path / key
    pools.write_text(pools_text)
    # The container's command, with the ConfigMap's file where it is mounted and the metrics
    # on a free local port in place of the pod's IP.
    command = [str(pools) if arg == f"/etc/pools/{key}" else arg for arg in container["command"]]
    assert command[:2] == ["resourceslice", "publish"] and str(pools) in command
    command = [
        "--metrics-address=127.0.0.1:0" if arg.startswith("--metrics-address") else arg
        for arg in command[1:]
    ]
    driver = next(arg.split("=", 1)[1] for arg in command if arg.startswith("--driver="))
    replicas = 2 if any(arg.startswith("--shards=") for arg in command) else 1
    token = token_of(admin, namespace, account, None)
    kubeconfig = kubeconfig_for(cluster, token, tmp_path / "kubeconfig", namespace)
    env = {**os.environ, "PYTHONPATH": str(Path(resourceslice.__file__).parents[1])}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "resourceslice.cli", *command, "--kubeconfig", str(kubeconfig)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for _ in range(replicas)
    ]
    outputs = [Output(process) for process in processes]
    selector = f"spec.driver={driver}"
    try:
        bases = [
            wait_until(lambda o=o: o.find(r"serving (http://\S+)/metrics"), timeout=60).group(1)  # type: ignore[misc]
            for o in outputs
        ]

        def probe(url: str) -> int:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    return int(response.status)
            except urllib.error.HTTPError as exc:
                return exc.code

        def said() -> str:
            return "\n".join("".join(o.lines) for o in outputs)

        # Alive, each: the Deployment's probes. Ready (synced once): the leader of plain
        # leader election. (A sharded replica's /readyz waits for every pool, its shards' and
        # the others': the Deployment's readiness probe is /livez.)
        for base in bases:
            wait_until(lambda base=base: probe(f"{base}/livez") == 200, timeout=60, describe=said)  # type: ignore[misc]
        if replicas == 1:
            wait_until(lambda: probe(f"{bases[0]}/readyz") == 200, timeout=60, describe=said)
        wait_until(
            lambda: slice_devices(admin, selector) == expected_devices(pools),
            timeout=60,
            describe=lambda: str(slice_devices(admin, selector)),
        )
        assert expected_devices(pools)  # something was published

        # An edit of the ConfigMap: updates; a pool renamed: a delete and a create.
        pools.write_text(pools_text.replace("400G", "800G"))
        assert "800G" in pools.read_text()
        wait_until(
            lambda: "400G" not in get_json(admin, SLICES, [("fieldSelector", selector)]).decode(),
            timeout=60,
        )
        pools.write_text(pools_text.replace("fabric-a:", "fabric-z:"))
        wait_until(
            lambda: slice_devices(admin, selector) == expected_devices(pools),
            timeout=60,
            describe=lambda: str(slice_devices(admin, selector)),
        )
        assert "fabric-z" in slice_devices(admin, selector)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)  # releases the Lease
        for process in processes:
            process.wait(timeout=60)
        written = [output.close(process) for output, process in zip(outputs, processes)]
    assert [process.returncode for process in processes] == [0] * replicas, written

    events = audited(cluster, f"system:serviceaccount:{namespace}:{account}")
    assert refused(events) == []
    assert used(events) == granted(*roles_of(docs, namespace, account))


@pytest.mark.parametrize("render", WITH_KUBELET_PLUGIN, indirect=True)
@pytest.mark.usefixtures("applied")
def test_the_kubelet_driver_with_its_service_account(
    cluster: TestCluster,
    admin: kubernetes.client.ApiClient,
    docs: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    """examples/kubelet_driver.py with a token of the DaemonSet's ServiceAccount bound to a
    pod on its node: registered, publishing, preparing a claim; every verb granted used."""
    daemonset = find(docs, "DaemonSet")
    namespace = daemonset["metadata"]["namespace"]
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    node = "driver-node"
    create_node(admin, node)
    pod = scheduled_pod(admin, namespace, account, node)
    token = token_of(admin, namespace, account, pod)
    client = kubeconfig_client(str(kubeconfig_for(cluster, token, tmp_path / "kc", namespace)))
    example = load_example()
    node_dir = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))  # short: socket paths
    try:
        with KubeletHarness.start(node_dir / "registry") as kubelet:
            helper = example.run(
                client,
                node,
                pod_uid=pod["metadata"]["uid"],
                cdi_dir=str(node_dir / "cdi"),
                registrar_dir=str(node_dir / "registry"),
                plugin_data_dir=str(node_dir / "plugins" / example.DRIVER),
            )
            try:
                kubelet.wait_registered(example.DRIVER)
                assert helper.controller.wait_synced(timeout=60)
                claim = allocated_claim(
                    admin, example.DRIVER, "deploy-claim", ["demo-2"], node, node_name=node
                )
                answer = kubelet.prepare(example.DRIVER, [claim])
                assert answer["claims"][uid(claim)]["error"] == ""
                # The device's status, written with the pod's token (which names the node).
                path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/deploy-claim"
                [entry] = json.loads(get_json(admin, path))["status"]["devices"]
                assert entry["device"] == "demo-2"
                assert [c["type"] for c in entry["conditions"]] == ["Ready"]
                # More devices than one slice holds, then fewer: an update, a create, a delete.
                for count in (200, 4):
                    devices = [{"name": f"demo-{i}"} for i in range(count)]
                    helper.publish_resources(DriverResources(pools={node: Pool(devices=devices)}))
                    assert helper.controller.wait_synced(timeout=60)
                    assert len(slice_devices(admin, f"spec.nodeName={node}")[node]) == count
            finally:
                helper.stop()
                delete_claim(admin, "deploy-claim")
                request(admin, "DELETE", SLICES, query=[("fieldSelector", f"spec.nodeName={node}")])
    finally:
        client.close()
        shutil.rmtree(node_dir, ignore_errors=True)

    events = audited(cluster, f"system:serviceaccount:{namespace}:{account}")
    assert refused(events) == []
    assert used(events) == granted(*roles_of(docs, namespace, account)) - SYNTHETIC


# The slices the policy test writes by hand: a driver of their own.
POLICY_DRIVER = "policy.example.com"


def slice_body(name: str, node: str | None) -> dict[str, Any]:
    where: dict[str, Any] = {"nodeName": node} if node else {"allNodes": True}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": POLICY_DRIVER,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "demo-0"}],
            **where,
        },
    }


def denied(call: Any) -> str:
    """The apiserver's message when ``call`` is refused by the policy; fails if allowed."""
    with pytest.raises(ApiException) as refusal:
        call()
    assert refusal.value.status in (403, 422), refusal.value
    return str(json.loads(refusal.value.body)["message"])


@pytest.mark.parametrize("render", WITH_KUBELET_PLUGIN, indirect=True)
@pytest.mark.usefixtures("applied")
def test_the_policy_confines_a_driver_pod_to_its_nodes_slices(
    cluster: TestCluster,
    admin: kubernetes.client.ApiClient,
    docs: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    """Node A's kubelet plugin (its ServiceAccount's token, bound to a pod on node A) can
    neither create, update, take over nor delete node B's slice, nor write one for all
    nodes; its own node's it can."""
    daemonset = find(docs, "DaemonSet")
    namespace = daemonset["metadata"]["namespace"]
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    for node in ("node-a", "node-b"):
        create_node(admin, node)
    pod_a = scheduled_pod(admin, namespace, account, "node-a")
    token = token_of(admin, namespace, account, pod_a)
    client_a = kubeconfig_client(str(kubeconfig_for(cluster, token, tmp_path / "kc", namespace)))
    try:

        def write(client: kubernetes.client.ApiClient, method: str, body: dict[str, Any]) -> Any:
            name = body["metadata"]["name"]
            path = SLICES if method == "POST" else f"{SLICES}/{name}"
            return json.loads(send_json(client, method, path, json.dumps(body).encode()))

        def refused_now() -> bool:
            """A dry run of node B's slice: refused once the apiserver has loaded the
            policy (admission runs for dry runs too; nothing is stored either way)."""
            body = json.dumps(slice_body("b-new", "node-b")).encode()
            try:
                request(client_a, "POST", SLICES, query=[("dryRun", "All")], body=body)
            except ApiException as exc:
                return exc.status in (403, 422)
            return False

        wait_until(refused_now, timeout=60)
        message = denied(lambda: write(client_a, "POST", slice_body("b-new", "node-b")))
        assert "may only write ResourceSlices of that node" in message
        denied(lambda: write(client_a, "POST", slice_body("everywhere", None)))

        theirs = write(admin, "POST", slice_body("b-own", "node-b"))
        theirs["spec"]["devices"] = [{"name": "demo-9"}]
        denied(lambda: write(client_a, "PUT", theirs))
        moved = {**theirs, "spec": {**theirs["spec"], "nodeName": "node-a"}}
        denied(lambda: write(client_a, "PUT", moved))  # taking B's slice over
        denied(lambda: request(client_a, "DELETE", f"{SLICES}/b-own"))

        mine = write(client_a, "POST", slice_body("a-own", "node-a"))
        mine["spec"]["devices"] = [{"name": "demo-1"}]
        write(client_a, "PUT", mine)
        request(client_a, "DELETE", f"{SLICES}/a-own")
        assert list(slice_devices(admin, f"spec.driver={POLICY_DRIVER}")) == ["b-own"]
    finally:
        client_a.close()
        request(admin, "DELETE", SLICES, query=[("fieldSelector", f"spec.driver={POLICY_DRIVER}")])


WORKLOADS = ("Deployment", "DaemonSet")
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
_namespaces = itertools.count()


def enforced_level(docs: list[dict[str, Any]], workload: dict[str, Any]) -> str:
    """The Pod Security level the workload's own namespace enforces, as the render says."""
    namespace = find(docs, "Namespace", workload["metadata"]["namespace"])
    return str(namespace["metadata"].get("labels", {}).get(PSA_ENFORCE, "none"))


@pytest.mark.parametrize("render", list(RENDERS), indirect=True)
def test_every_workload_drops_what_it_does_not_need(docs: list[dict[str, Any]]) -> None:
    """On plain data: what each container's securityContext says, and pinned images."""
    found = [d for d in docs if d["kind"] in WORKLOADS]
    assert found
    for workload in found:
        spec = workload["spec"]["template"]["spec"]
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["readOnlyRootFilesystem"] is True
            # A tag or a digest, never :latest (nor no tag, which is latest).
            tag = container["image"].rpartition("/")[2].partition(":")[2]
            assert "@" in container["image"] or tag not in ("", "latest"), container["image"]


@pytest.mark.parametrize("render", WITH_PUBLISHER, indirect=True)
def test_only_the_scraper_may_reach_the_publishers_metrics(docs: list[dict[str, Any]]) -> None:
    """The NetworkPolicy is the publisher's: its pods, their metrics port, ingress only."""
    policy = find(docs, "NetworkPolicy")
    deployment = find(docs, "Deployment")
    template = deployment["spec"]["template"]
    [container] = template["spec"]["containers"]
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"] == template["metadata"]["labels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": container["ports"][0]["name"], "protocol": "TCP"}]
    assert [list(peer) for peer in rule["from"]] == [["namespaceSelector"]]


def namespace_enforcing(admin: kubernetes.client.ApiClient, level: str, account: str) -> str:
    """A new namespace whose Pod Security Admission enforces ``level``, with ``account``."""
    name = f"psa-{level}-{next(_namespaces)}"
    body = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {PSA_ENFORCE: level}}}  # fmt: skip
    send_json(admin, "POST", "/api/v1/namespaces", json.dumps(body).encode())
    account_body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}
    path = f"/api/v1/namespaces/{name}/serviceaccounts"
    send_json(admin, "POST", path, json.dumps(account_body).encode())
    return name


def admit_pod(admin: kubernetes.client.ApiClient, workload: dict[str, Any], namespace: str) -> str:
    """A dry-run create of the workload's Pod in ``namespace`` (admission runs, nothing is
    stored): "" when admitted, else the apiserver's message."""
    template = workload["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": workload["metadata"]["name"],
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }
    path = f"/api/v1/namespaces/{namespace}/pods"
    try:
        request(admin, "POST", path, query=[("dryRun", "All")], body=json.dumps(pod).encode())
    except ApiException as exc:
        assert exc.status == 403, exc
        return str(json.loads(exc.body)["message"])
    return ""


def violations(message: str) -> set[str]:
    """The Pod Security checks a refusal names: ``hostPath volumes``, ``runAsUser=0``..."""
    _, _, listed = message.partition('": ')
    return {re.sub(r" \(.*", "", part) for part in re.split(r"\), ", listed)}


@pytest.mark.parametrize("render", WITH_PUBLISHER, indirect=True)
@pytest.mark.usefixtures("applied")
def test_the_publisher_is_admitted_under_restricted(
    admin: kubernetes.client.ApiClient, docs: list[dict[str, Any]]
) -> None:
    """The publisher meets the "restricted" Pod Security Standard: its pod is admitted by the
    apiserver's Pod Security Admission enforcing it. Its own namespace enforces it when it
    runs alone; beside the kubelet plugin, the namespace is the plugin's ("privileged")."""
    deployment = find(docs, "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    restricted = namespace_enforcing(admin, "restricted", account)
    assert admit_pod(admin, deployment, restricted) == ""
    alone = not any(d["kind"] == "DaemonSet" for d in docs)
    assert enforced_level(docs, deployment) == ("restricted" if alone else "privileged")
    assert admit_pod(admin, deployment, deployment["metadata"]["namespace"]) == ""


@pytest.mark.parametrize("render", WITH_KUBELET_PLUGIN, indirect=True)
@pytest.mark.usefixtures("applied")
def test_the_kubelet_driver_needs_privileged_for_its_host_mounts_only(
    admin: kubernetes.client.ApiClient, docs: list[dict[str, Any]]
) -> None:
    """Its namespace is "privileged", and needs to be for the hostPath volumes alone: under
    "baseline" they are its only violation; under "restricted", they and root."""
    daemonset = find(docs, "DaemonSet")
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    baseline = admit_pod(admin, daemonset, namespace_enforcing(admin, "baseline", account))
    assert violations(baseline) == {"hostPath volumes"}, baseline
    restricted = admit_pod(admin, daemonset, namespace_enforcing(admin, "restricted", account))
    assert violations(restricted) == {
        "restricted volume types",
        "runAsNonRoot != true",
        "runAsUser=0",
    }, restricted
    assert enforced_level(docs, daemonset) == "privileged"
    assert admit_pod(admin, daemonset, daemonset["metadata"]["namespace"]) == ""
