"""Who may write a claim's device status, on the real apiserver with its audit log.

Since Kubernetes 1.36 (DRAResourceClaimGranularStatusAuthorization, on by default) a write of
``status.devices`` also needs, per driver whose entries change, a verb on the synthetic
``resourceclaims/driver`` subresource named after the driver: ``associated-node:<verb>`` for a
service account whose token names the node the claim is allocated on (a pod's token, bound
to a pod on that node; the claim's node selector names one node), else
``arbitrary-node:<verb>``. The kubelet plugin's role (the chart's, deploy/chart) grants
``associated-node:patch`` for its driver only: a plugin on node A writes the status of claims
allocated on node A and is refused for claims on node B, as the audit log shows. The central
driver's role of docs/security.md (``arbitrary-node:patch``) writes claims on any node.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from chart.renders import manifests
from resourceslice import kubeletplugin
from resourceslice._http import send_json
from resourceslice._kubeclient import kubeconfig_client
from resourceslice.claimstatus import DeviceStatusWriter
from resourceslice.testing import TestCluster, start_cluster, wait_until
from support.claim_env import allocated, entries, read, result

from .test_deploy import create_node, kubeconfig_for, scheduled_pod, token_of

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DRIVER = "demo.example.com"  # the manifest's driver
NAMESPACE = "plugins"
ACCOUNT = "demo-plugin"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
READY = {"type": "Ready", "status": "True", "reason": "Prepared"}
# The status writes of everyone but the admin, once answered.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "users": ["admin"]},
        {
            "level": "Metadata",
            "resources": [{"group": "resource.k8s.io", "resources": ["resourceclaims/status"]}],
        },
        {"level": "None"},
    ],
}
_names = itertools.count()


def manifest_role() -> dict[str, Any]:
    """The kubelet plugin's ClusterRole, as the chart renders it by default."""
    [role] = [
        d
        for d in manifests("default")
        if d["kind"] == "ClusterRole"
        and any("resourceclaims/driver" in rule.get("resources", ()) for rule in d["rules"])
    ]
    return dict(role)


def documented_role() -> dict[str, Any]:
    """The central driver's ClusterRole, as docs/security.md shows it."""
    text = (REPO / "docs/security.md").read_text()
    [block] = [
        b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "arbitrary-node:patch" in b
    ]
    role = yaml.safe_load(block)
    assert role["kind"] == "ClusterRole"
    return dict(role)


def status_rules(role: dict[str, Any]) -> dict[str, Any]:
    """``role`` with only its rules about claims' status (the rest is publishing's)."""
    rules = [
        r for r in role["rules"] if any(res.startswith("resourceclaims/") for res in r["resources"])
    ]
    return {**role, "rules": rules}


def without_rule(role: dict[str, Any], resource: str) -> dict[str, Any]:
    trimmed = copy.deepcopy(role)
    trimmed["rules"] = [r for r in trimmed["rules"] if resource not in r["resources"]]
    return trimmed


@pytest.fixture(scope="module")
def cluster() -> Iterator[TestCluster]:
    with start_cluster(audit_policy=AUDIT_POLICY) as started:
        yield started


@pytest.fixture(scope="module")
def admin(cluster: TestCluster) -> Iterator[kubernetes.client.ApiClient]:
    client = cluster.api_client("admin")
    try:
        for name in ("node-a", "node-b"):
            create_node(client, name)
        send_json(
            client,
            "POST",
            "/api/v1/namespaces",
            json.dumps({"metadata": {"name": NAMESPACE}}).encode(),
        )
        account = {"metadata": {"name": ACCOUNT}}
        send_json(
            client,
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
            json.dumps(account).encode(),
        )
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def plugin_client_on_a(
    cluster: TestCluster, admin: kubernetes.client.ApiClient
) -> Iterator[kubernetes.client.ApiClient]:
    """The plugin's client on node A: its pod's token, which names node A."""
    pod = scheduled_pod(admin, NAMESPACE, ACCOUNT, "node-a")
    path = Path(tempfile.mkdtemp(prefix="kc-")) / "kubeconfig"
    client = kubeconfig_client(
        str(kubeconfig_for(cluster, token_of(admin, NAMESPACE, ACCOUNT, pod), path, NAMESPACE))
    )
    try:
        yield client
    finally:
        client.close()
        shutil.rmtree(path.parent, ignore_errors=True)


class Bound:
    """A ClusterRole bound to a subject while the block runs, effective once it is entered."""

    def __init__(
        self,
        cluster: TestCluster,
        admin: kubernetes.client.ApiClient,
        role: dict[str, Any],
        subject: dict[str, Any],
    ) -> None:
        self.name = f"claim-status-{next(_names)}"
        self.cluster, self.admin = cluster, admin
        self.role = {**copy.deepcopy(role), "metadata": {"name": self.name}}
        self.subject = subject

    def __enter__(self) -> Bound:
        rbac = kubernetes.client.RbacAuthorizationV1Api(self.admin)
        rbac.create_cluster_role(self.role)
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": self.name}
        rbac.create_cluster_role_binding(
            {"metadata": {"name": self.name}, "roleRef": ref, "subjects": [self.subject]}
        )
        # The authorizer sees RBAC objects through its informer: wait until it has these.
        wait_until(lambda: all(self.allowed(*grant) for grant in self.grants()), timeout=30)
        return self

    def grants(self) -> list[tuple[str, str, str]]:
        """(verb, resource, name) of each thing the role allows."""
        return [
            (verb, resource, name)
            for rule in self.role["rules"]
            for verb in rule["verbs"]
            for resource in rule["resources"]
            for name in rule.get("resourceNames") or [""]
        ]

    def allowed(self, verb: str, resource: str, name: str = "") -> bool:
        kind, _, sub = resource.partition("/")
        attributes = {
            "group": "resource.k8s.io",
            "resource": kind,
            "subresource": sub,
            "verb": verb,
            "name": name,
            "namespace": "default",
        }
        user = (
            self.subject["name"]
            if self.subject["kind"] == "User"
            else f"system:serviceaccount:{self.subject['namespace']}:{self.subject['name']}"
        )
        groups = ["system:authenticated"] + (
            ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"]
            if self.subject["kind"] == "ServiceAccount"
            else []
        )
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": attributes},
        }
        answer = json.loads(
            send_json(
                self.admin,
                "POST",
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                json.dumps(review).encode(),
            )
        )
        return bool(answer["status"].get("allowed"))

    def __exit__(self, *exc: object) -> None:
        rbac = kubernetes.client.RbacAuthorizationV1Api(self.admin)
        rbac.delete_cluster_role_binding(self.name)
        rbac.delete_cluster_role(self.name)
        # Gone for the authorizer too before the next test binds less.
        wait_until(lambda: not any(self.allowed(*grant) for grant in self.grants()), timeout=30)


PLUGIN = {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}


class NoClaims:
    """A plugin kubelet never calls here: the test writes status through its helper."""

    def prepare_resource_claims(self, claims: Any) -> dict[str, kubeletplugin.PrepareResult]:
        return {}

    def unprepare_resource_claims(self, claims: Any) -> dict[str, BaseException | None]:
        return {}


def claim_on(admin: kubernetes.client.ApiClient, node: str, driver: str = DRIVER) -> dict[str, Any]:
    """A claim of one of ``driver``'s devices on ``node``, as kube-scheduler allocates it."""
    return allocated(admin, f"claim-{next(_names)}", [result(driver, node, "demo-0")], node=node)


def refusal(call: Any) -> ApiException:
    with pytest.raises(ApiException) as refused:
        call()
    return refused.value


def audited(cluster: TestCluster, claim: str) -> list[tuple[str, int, list[str]]]:
    """(user, status code, the node its token names) of each status write of ``claim``."""
    found = []
    for line in cluster.audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("objectRef", {}).get("name") == claim and event["stage"] == "ResponseComplete":
            extra = event["user"].get("extra") or {}
            found.append(
                (
                    event["user"]["username"],
                    event["responseStatus"]["code"],
                    extra.get(NODE_NAME_KEY, []),
                )
            )
    return found


def test_node_a_plugin_writes_claims_on_node_a_only(
    cluster: TestCluster,
    admin: kubernetes.client.ApiClient,
    plugin_client_on_a: kubernetes.client.ApiClient,
) -> None:
    on_a, on_b = claim_on(admin, "node-a"), claim_on(admin, "node-b")
    node_dir = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    (node_dir / "registry").mkdir()
    with Bound(cluster, admin, status_rules(manifest_role()), PLUGIN):
        helper = kubeletplugin.start(
            NoClaims(), driver=DRIVER, api_client=plugin_client_on_a, node_name="node-a",
            registrar_dir=str(node_dir / "registry"), plugin_data_dir=str(node_dir / "plugin"),
        )  # fmt: skip
        try:
            helper.device_status.set(on_a, pool="node-a", device="demo-0", conditions=[READY])
            refused = refusal(
                lambda: helper.device_status.set(
                    on_b, pool="node-b", device="demo-0", conditions=[READY]
                )
            )
        finally:
            helper.stop()
            shutil.rmtree(node_dir, ignore_errors=True)
    assert refused.status == 422
    message = json.loads(refused.body)["message"]
    # Node A's plugin is not associated with B's claim: only arbitrary-node would do.
    assert 'requires resource="resourceclaims/driver", verb="[arbitrary-node:patch]"' in message
    assert set(entries(read(admin, on_a["metadata"]["name"]))) == {(DRIVER, "node-a", "demo-0")}
    assert entries(read(admin, on_b["metadata"]["name"])) == {}
    # The audit log: the same plugin, its token naming node A, allowed on A, refused on B.
    assert audited(cluster, on_a["metadata"]["name"]) == [(USER, 200, ["node-a"])]
    assert audited(cluster, on_b["metadata"]["name"]) == [(USER, 422, ["node-a"])]


def test_each_rule_of_the_manifest_is_needed(
    cluster: TestCluster,
    admin: kubernetes.client.ApiClient,
    plugin_client_on_a: kubernetes.client.ApiClient,
) -> None:
    role = status_rules(manifest_role())
    group = ["resource.k8s.io"]
    assert role["rules"] == [
        {"apiGroups": group, "resources": ["resourceclaims/status"], "verbs": ["patch"]},
        {
            "apiGroups": group,
            "resources": ["resourceclaims/driver"],
            "resourceNames": [DRIVER],
            "verbs": ["associated-node:patch"],
        },
    ]
    writer = DeviceStatusWriter(plugin_client_on_a, driver=DRIVER, node_name="node-a")

    def write(claim: dict[str, Any], w: DeviceStatusWriter = writer) -> Any:
        return w.set(
            claim,
            pool=claim["status"]["allocation"]["devices"]["results"][0]["pool"],
            device="demo-0",
            data={},
        )

    with Bound(cluster, admin, without_rule(role, "resourceclaims/driver"), PLUGIN):
        refused = refusal(lambda: write(claim_on(admin, "node-a")))
        assert refused.status == 422 and "resourceclaims/driver" in refused.body
    with Bound(cluster, admin, without_rule(role, "resourceclaims/status"), PLUGIN):
        assert refusal(lambda: write(claim_on(admin, "node-a"))).status == 403
    with Bound(cluster, admin, role, PLUGIN):
        write(claim_on(admin, "node-a"))
        # Another driver's entries, even on its own node: the rule names the driver.
        other = DeviceStatusWriter(
            plugin_client_on_a, driver="other.example.com", node_name="node-a"
        )
        refused = refusal(lambda: write(claim_on(admin, "node-a", "other.example.com"), other))
        assert refused.status == 422 and "resourceclaims/driver" in refused.body
        # A token of the account that names no node (not a pod's): no claim is its node's.
        unbound = kubeconfig_client(
            str(
                kubeconfig_for(
                    cluster,
                    token_of(admin, NAMESPACE, ACCOUNT, None),
                    Path(tempfile.mkdtemp()) / "kc",
                    NAMESPACE,
                )
            )
        )
        try:
            refused = refusal(
                lambda: write(claim_on(admin, "node-a"), DeviceStatusWriter(unbound, driver=DRIVER))
            )
            assert refused.status == 422 and "resourceclaims/driver" in refused.body
        finally:
            unbound.close()


def test_a_central_driver_writes_claims_on_any_node(
    cluster: TestCluster, admin: kubernetes.client.ApiClient
) -> None:
    """docs/security.md's role for a driver that does not run on the claims' nodes."""
    role = documented_role()
    client = cluster.api_client("driver")  # a user with no rights of its own
    writer = DeviceStatusWriter(client, driver=DRIVER)
    try:
        refused = refusal(
            lambda: writer.set(claim_on(admin, "node-a"), pool="node-a", device="demo-0", data={})
        )
        assert refused.status == 403
        with Bound(
            cluster,
            admin,
            role,
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "driver"},
        ):
            for node in ("node-a", "node-b"):
                claim = claim_on(admin, node)
                writer.set(claim, pool=node, device="demo-0", conditions=[READY])
                writer.clear(claim, pool=node, device="demo-0")
                assert audited(cluster, claim["metadata"]["name"]) == [
                    ("driver", 200, []),
                    ("driver", 200, []),
                ]
    finally:
        client.close()
