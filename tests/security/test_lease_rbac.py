"""The chart's Lease Role is exactly what leader election needs (plain, and with shards); its
Deployment runs a command the CLI accepts."""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from chart.renders import find, manifests
from resourceslice import _poolfile
from resourceslice.cli import common
from resourceslice.cli.command import build_parser
from resourceslice.leaderelection import LeaderElection, LeaderElector
from resourceslice.sharding import GROUP_LABEL, ShardedElector
from resourceslice.testing import TestCluster

NAMESPACE = "default"
_names = itertools.count()


def shipped(kind: str, render: str = "publisher") -> dict[str, Any]:
    """The one object of ``kind`` in a render of the chart (tests/chart/renders.py)."""
    return find(manifests(render), kind)


@contextmanager
def bound_lease_role(cluster: TestCluster, rules: list[dict[str, Any]]) -> Iterator[None]:
    """A namespaced Role with ``rules`` bound to the rightless ``driver`` user."""
    name = f"lease-role-test-{next(_names)}"
    admin = cluster.api_client("admin")
    rbac = kubernetes.client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(NAMESPACE, {"metadata": {"name": name}, "rules": rules})
    rbac.create_namespaced_role_binding(
        NAMESPACE,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "driver"}
            ],
        },
    )
    try:
        yield
    finally:
        rbac.delete_namespaced_role_binding(name, NAMESPACE)
        rbac.delete_namespaced_role(name, NAMESPACE)
        admin.close()


def elect_and_release(cluster: TestCluster, lease: str) -> list[BaseException]:
    """As ``driver``: take the Lease, renew it, release it; the errors reported."""
    errors: list[BaseException] = []
    client = cluster.api_client("driver")
    try:
        elector = LeaderElector(
            client,
            LeaderElection(NAMESPACE, lease, lease_duration=3, renew_deadline=2, retry_period=0.5),
            on_change=lambda leading: None,
            on_error=lambda exc, _: errors.append(exc),
        )
        if elector.try_acquire_or_renew():
            elector.try_acquire_or_renew()
        elector.stop()
    finally:
        client.close()
    return errors


def without(rules: list[dict[str, Any]], verb: str) -> list[dict[str, Any]]:
    trimmed = copy.deepcopy(rules)
    for rule in trimmed:
        rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    return [rule for rule in trimmed if rule["verbs"]]


def the_lease(role: dict[str, Any]) -> str:
    """The one Lease the Role names: publish's default for the Deployment's driver."""
    [name] = {n for rule in role["rules"] for n in rule.get("resourceNames", [])}
    deployment = shipped("Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert name == f"resourceslice-{build_parser().parse_args(container['command'][1:]).driver}"
    return str(name)


@pytest.mark.integration
def test_the_shipped_role_is_enough_and_each_verb_is_needed(kube_cluster: TestCluster) -> None:
    role = shipped("Role")
    assert shipped("RoleBinding")["roleRef"]["name"] == role["metadata"]["name"]
    lease = the_lease(role)
    admin = kube_cluster.api_client("admin")
    leases = kubernetes.client.CoordinationV1Api(admin)

    def delete_lease() -> None:
        with contextlib.suppress(kubernetes.client.ApiException):
            leases.delete_namespaced_lease(lease, NAMESPACE)

    try:
        with bound_lease_role(kube_cluster, role["rules"]):
            assert elect_and_release(kube_cluster, lease) == []
            # Only that Lease: another one can be created, but never taken.
            errors = elect_and_release(kube_cluster, "another-lease")
            assert any(getattr(e, "status", None) == 403 for e in errors), errors
        assert leases.read_namespaced_lease(lease, NAMESPACE).spec.holder_identity in ("", None)
        for verb in ("get", "create", "update"):
            delete_lease()
            if verb != "create":  # without create, the Lease must exist already
                leases.create_namespaced_lease(NAMESPACE, {"metadata": {"name": lease}})
            with bound_lease_role(kube_cluster, without(role["rules"], verb)):
                errors = elect_and_release(kube_cluster, lease)
            assert any(getattr(e, "status", None) == 403 for e in errors), (verb, errors)
    finally:
        delete_lease()
        with contextlib.suppress(kubernetes.client.ApiException):
            leases.delete_namespaced_lease("another-lease", NAMESPACE)
        admin.close()


def sharded_round(cluster: TestCluster, lease: str) -> tuple[list[BaseException], list[int]]:
    """As ``driver``: one round of a sharded elector; the errors reported, the shards held."""
    errors: list[BaseException] = []
    client = cluster.api_client("driver")
    try:
        elector = ShardedElector(
            client,
            LeaderElection(NAMESPACE, lease, lease_duration=3, renew_deadline=2,
                           retry_period=0.5, shards=2),
            on_change=lambda leading, covers: None,
            on_error=lambda exc, _: errors.append(exc),
        )  # fmt: skip
        try:
            elector.round()
        except kubernetes.client.ApiException as exc:
            errors.append(exc)
        held = elector.held()
        elector.stop()
    finally:
        client.close()
    return errors, held


@pytest.mark.integration
def test_shards_need_list(kube_cluster: TestCluster) -> None:
    """The chart's Lease Role with shards (the sharded render) is enough for them: "list"
    added, and no resourceNames (the member Leases are named after each replica). The Role
    without shards (no list) is not."""
    role = shipped("Role")
    with_list = shipped("Role", "sharded")["rules"]
    assert sorted({v for rule in with_list for v in rule["verbs"]}) == sorted(
        {"list", *(v for rule in role["rules"] for v in rule["verbs"])}
    )
    assert not any("resourceNames" in rule for rule in with_list)
    admin = kube_cluster.api_client("admin")
    leases = kubernetes.client.CoordinationV1Api(admin)
    try:
        with bound_lease_role(kube_cluster, with_list):
            errors, held = sharded_round(kube_cluster, "sharded-with-list")
        assert (errors, held) == ([], [0, 1])
        with bound_lease_role(kube_cluster, role["rules"]):
            errors, held = sharded_round(kube_cluster, "sharded-shipped")
        assert any(getattr(e, "status", None) == 403 for e in errors), errors
        assert held == []
    finally:
        leases.delete_collection_namespaced_lease(NAMESPACE, label_selector=GROUP_LABEL)
        admin.close()


@pytest.mark.parametrize("render", ["publisher", "sharded"])
def test_the_deployment_runs_a_valid_publish(render: str) -> None:
    deployment = shipped("Deployment", render)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    # kubelet expands $(POD_IP) from the container's env: the pod's IP (downward API).
    assert container["env"] == [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    ]
    pod_ip = "10.244.1.7"
    command = [arg.replace("$(POD_IP)", pod_ip) for arg in container["command"]]
    assert command[0] == "resourceslice"
    args = build_parser().parse_args(command[1:])
    role = shipped("Role", render)
    listed = any("list" in rule["verbs"] for rule in role["rules"])
    assert args.leader_elect and not args.once and (args.shards > 1) == listed
    # The probes ask the metrics server the command runs, where kubelet's probes connect:
    # the pod's IP (only: not every interface).
    port = container["ports"][0]
    assert args.metrics_address == (pod_ip, port["containerPort"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/livez", "port": port["name"]}
    # The pools file of the ConfigMap is valid for that driver.
    config = shipped("ConfigMap", render)
    [mount] = container["volumeMounts"]
    assert args.file.parent == Path(mount["mountPath"])
    document = yaml.safe_load(config["data"][args.file.name])
    resources, errors = _poolfile.parse_resources(document, common.selection_of(args))
    assert errors == [] and resources.pools
    assert deployment["spec"]["replicas"] >= 2
