"""DeviceTaintRules on the real apiserver: a rule created, replaced and removed by name, for a
device or a selector, under the object's field manager; someone else's rule of the same name
left alone, another writer's change to ours put back; validation before anything is sent;
cluster errors to the error handler."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

import resourceslice as rs
from resourceslice._http import request, send_json
from resourceslice.testing import TestCluster, wait_until

pytestmark = pytest.mark.integration

DRIVER = "gpu.rules.example.com"
RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
UNHEALTHY: rs.DeviceTaint = {
    "key": "gpu.example.com/unhealthy",
    "value": "xid-79",
    "effect": "NoExecute",
}


class Errors:
    """An error handler that keeps what it was told."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[BaseException, str]] = []

    def __call__(self, exc: BaseException, message: str) -> None:
        with self.lock:
            self.seen.append((exc, message))

    def of(self, kind: type[BaseException]) -> list[Any]:
        with self.lock:
            return [exc for exc, _ in self.seen if isinstance(exc, kind)]


def get_rule(client: kubernetes.client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        rule: dict[str, Any] = json.loads(request(client, "GET", f"{RULES}/{name}").data)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return rule


@pytest.fixture
def rule_names(kube_client: kubernetes.client.ApiClient) -> Iterator[list[str]]:
    """Names the test's rules use; deleted afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            request(kube_client, "DELETE", f"{RULES}/{name}")
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def node(kube_client: kubernetes.client.ApiClient) -> Iterator[dict[str, Any]]:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "rules-node"}}
    created = json.loads(send_json(kube_client, "POST", "/api/v1/nodes", json.dumps(body).encode()))
    try:
        yield created
    finally:
        request(kube_client, "DELETE", "/api/v1/nodes/rules-node")


def test_a_rule_is_created_replaced_and_removed(
    kube_client: kubernetes.client.ApiClient, rule_names: list[str], node: dict[str, Any]
) -> None:
    rule_names += ["gpu-3-unhealthy", "pool-maintenance"]
    errors = Errors()
    owner = rs.Owner(api_version="v1", kind="Node", name="rules-node")
    with rs.DeviceTaintRules(
        kube_client, driver=DRIVER, owner=owner, error_handler=errors
    ) as rules:
        rules.set("gpu-3-unhealthy", ("rules-node", "gpu-3"), UNHEALTHY)
        rules.set("pool-maintenance", rs.DeviceTaintSelector(pool="rules-node"),
                  {"key": "gpu.example.com/maintenance", "effect": "NoSchedule"})  # fmt: skip
        assert rules.wait_synced(timeout=30), errors.seen
        stored = get_rule(kube_client, "gpu-3-unhealthy")
        assert stored is not None
        assert stored["spec"]["deviceSelector"] == {
            "driver": DRIVER,
            "pool": "rules-node",
            "device": "gpu-3",
        }
        taint = stored["spec"]["taint"]
        assert {k: taint[k] for k in ("key", "value", "effect")} == UNHEALTHY
        assert taint["timeAdded"]  # the apiserver's
        # Owned by the Node (garbage-collected with it), written under the field manager.
        assert stored["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": "rules-node",
             "uid": node["metadata"]["uid"], "controller": True}
        ]  # fmt: skip
        assert [m["manager"] for m in stored["metadata"]["managedFields"]] == [
            f"resourceslice-{DRIVER}"
        ]
        pool_rule = get_rule(kube_client, "pool-maintenance")
        assert pool_rule is not None
        assert pool_rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": "rules-node"}

        # Replaced: every device of that name in any pool, another value, no value at all.
        rules.set("gpu-3-unhealthy", rs.DeviceTaintSelector(device="gpu-3"),
                  {"key": "gpu.example.com/unhealthy", "effect": "NoExecute"})  # fmt: skip
        assert rules.wait_synced(timeout=30), errors.seen
        replaced = get_rule(kube_client, "gpu-3-unhealthy")
        assert replaced is not None
        assert replaced["metadata"]["uid"] == stored["metadata"]["uid"]
        assert replaced["spec"]["deviceSelector"] == {"driver": DRIVER, "device": "gpu-3"}
        assert "value" not in replaced["spec"]["taint"]

        rules.remove("gpu-3-unhealthy")
        rules.remove("never-set")  # none there: nothing to do, no error
        assert rules.wait_synced(timeout=30), errors.seen
        assert get_rule(kube_client, "gpu-3-unhealthy") is None
        assert get_rule(kube_client, "pool-maintenance") is not None
        assert list(rules.rules()) == ["pool-maintenance"]
    assert errors.seen == []
    assert not rules.wait_synced(timeout=0)
    with pytest.raises(rs.ControllerStoppedError):
        rules.remove("pool-maintenance")


def test_a_restarted_driver_removes_the_rule_it_set_before(
    kube_client: kubernetes.client.ApiClient, rule_names: list[str]
) -> None:
    """remove() deletes a rule of the driver's field manager that this object never set."""
    rule_names.append("gpu-5-unhealthy")
    with rs.DeviceTaintRules(kube_client, driver=DRIVER) as before:
        before.set("gpu-5-unhealthy", ("pool-a", "gpu-5"), UNHEALTHY)
        assert before.wait_synced(timeout=30)
    with rs.DeviceTaintRules(kube_client, driver=DRIVER) as after:
        after.remove("gpu-5-unhealthy")
        assert after.wait_synced(timeout=30)
    assert get_rule(kube_client, "gpu-5-unhealthy") is None


def foreign_rule(client: kubernetes.client.ApiClient, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": {"driver": "other.example.com"},
                 "taint": {"key": "admin/maintenance", "effect": "NoSchedule"}},
    }  # fmt: skip
    created: dict[str, Any] = json.loads(
        send_json(client, "POST", f"{RULES}?fieldManager=admin", json.dumps(body).encode())
    )
    return created


def test_someone_elses_rule_of_the_same_name_is_left_alone(
    kube_client: kubernetes.client.ApiClient, rule_names: list[str]
) -> None:
    rule_names.append("taken")
    theirs = foreign_rule(kube_client, "taken")
    errors = Errors()
    with rs.DeviceTaintRules(kube_client, driver=DRIVER, error_handler=errors) as rules:
        rules.set("taken", ("pool-a", "gpu-0"), UNHEALTHY)
        wait_until(lambda: errors.of(rs.DeviceTaintRuleExistsError), timeout=30)
        assert not rules.wait_synced(timeout=0.1)  # retried with backoff, not given up
        exists = errors.of(rs.DeviceTaintRuleExistsError)[0]
        assert (exists.name, exists.managers) == ("taken", ["admin"])
        rules.remove("taken")  # not ours to delete: said, and done with
        assert rules.wait_synced(timeout=30)
    stored = get_rule(kube_client, "taken")
    assert stored is not None
    assert stored["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]


def test_another_writers_change_to_our_rule_is_put_back(
    kube_client: kubernetes.client.ApiClient, rule_names: list[str]
) -> None:
    rule_names.append("gpu-7-unhealthy")
    errors = Errors()
    with rs.DeviceTaintRules(kube_client, driver=DRIVER, error_handler=errors) as rules:
        rules.set("gpu-7-unhealthy", ("pool-a", "gpu-7"), UNHEALTHY)
        assert rules.wait_synced(timeout=30)
        # Someone lowers the effect, as `kubectl edit` would (an update under its manager).
        edited = get_rule(kube_client, "gpu-7-unhealthy")
        assert edited is not None
        edited["spec"]["taint"]["effect"] = "NoSchedule"
        path = f"{RULES}/gpu-7-unhealthy?fieldManager=kubectl-edit"
        send_json(kube_client, "PUT", path, json.dumps(edited).encode())

        rules.set("gpu-7-unhealthy", ("pool-a", "gpu-7"), {**UNHEALTHY, "value": "xid-48"})
        assert rules.wait_synced(timeout=30), errors.seen
    stored = get_rule(kube_client, "gpu-7-unhealthy")
    assert stored is not None
    assert stored["spec"]["taint"]["effect"] == "NoExecute"
    assert stored["spec"]["taint"]["value"] == "xid-48"
    conflict = errors.of(rs.DeviceTaintRuleConflictError)
    assert [(c.name, c.managers, c.restored) for c in conflict] == [
        ("gpu-7-unhealthy", ["kubectl-edit"], True)
    ]


def test_invalid_rules_are_refused_before_anything_is_sent(
    kube_client: kubernetes.client.ApiClient,
) -> None:
    with rs.DeviceTaintRules(kube_client, driver=DRIVER) as rules:
        with pytest.raises(rs.ValidationError) as raised:
            rules.set(
                "Bad_Name",
                ("pool/", "GPU-0"),
                {"key": "not a key", "value": "x" * 64, "effect": "PreferNoSchedule", "when": 1},
            )
        assert raised.value.errors == [
            "name: 'Bad_Name' must be a DNS subdomain of at most 253 characters",
            "target.pool: pool name must be at most 253 characters of /-separated DNS subdomains",
            "target.device: must be a DNS label",
            "taint.when: unknown field (known: key, value, effect, timeAdded)",
            "taint.key: must be a label name",
            "taint.value: must be a label value",
            "taint.effect: must be one of NoSchedule, NoExecute, None",
        ]
        with pytest.raises(rs.ValidationError, match=r"taint.effect: is required"):
            rules.set("ok", ("p", "d"), {"key": "k"})  # type: ignore[typeddict-item]
        with pytest.raises(rs.ValidationError, match=r"target: must be a DeviceTaintSelector"):
            rules.set("ok", ("p", "d", "x"), UNHEALTHY)  # type: ignore[arg-type]
        assert rules.rules() == {}
    with pytest.raises(rs.ValidationError, match="driver: must be a DNS subdomain"):
        rs.DeviceTaintRules(kube_client, driver="Not A Driver")


def test_cluster_errors_go_to_the_error_handler(
    kube_cluster: TestCluster, kube_client: kubernetes.client.ApiClient, rule_names: list[str]
) -> None:
    """A driver without the right to write rules: the 403 is reported and the rule retried;
    once it may, the rule is written."""
    rule_names.append("denied")
    errors = Errors()
    client = kube_cluster.api_client("driver")  # no rights
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "rules-writer"},
        "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"],
                   "verbs": ["get", "create", "patch", "delete"]}],
    }  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "rules-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "rules-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "driver"}],
    }  # fmt: skip
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    try:
        with rs.DeviceTaintRules(client, driver=DRIVER, error_handler=errors) as rules:
            rules.set("denied", ("pool-a", "gpu-0"), UNHEALTHY)
            wait_until(lambda: errors.of(ApiException), timeout=30)
            assert errors.of(ApiException)[0].status == 403
            assert errors.seen[0][1] == "DeviceTaintRule 'denied'"
            send_json(kube_client, "POST", f"{rbac}/clusterroles", json.dumps(role).encode())
            send_json(
                kube_client, "POST", f"{rbac}/clusterrolebindings", json.dumps(binding).encode()
            )
            assert rules.wait_synced(timeout=60), [
                (e.status, e.body) for e in errors.of(ApiException)
            ][-3:]
        assert get_rule(kube_client, "denied") is not None
    finally:
        client.close()
        for kind in ("clusterrolebindings", "clusterroles"):
            try:
                request(kube_client, "DELETE", f"{rbac}/{kind}/rules-writer")
            except ApiException as exc:
                if exc.status != 404:
                    raise
