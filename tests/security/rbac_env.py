"""The chart's ClusterRole for a node-local driver, bound to a test user, as shipped (or trimmed).

The test apiserver's ``driver`` user has no rights of its own: whatever it can do, it can do
through the binding made here, so a test shows what the shipped role allows.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kubernetes.client

from chart.renders import RENDERS, find, manifests, roles_of
from resourceslice.testing import TestCluster

_bindings = itertools.count()


def shipped_role() -> dict[str, Any]:
    """What the chart grants a node-local driver for publishing: its kubelet plugin's
    ClusterRole (the chart's default render), the rules on ResourceSlices and Nodes (the
    owner's uid). The rule on ResourceClaims is the kubelet plugin's own, which
    tests/security/test_deploy.py shows used."""
    docs = manifests("default")
    account = find(docs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    [role] = roles_of(docs, RENDERS["default"].namespace, account)
    rules = [r for r in role["rules"] if r["resources"] != ["resourceclaims"]]
    assert {g for r in rules for g in r["apiGroups"]} == {"", "resource.k8s.io"}
    return {**role, "rules": rules}


def without_verb(role: dict[str, Any], verb: str) -> dict[str, Any]:
    trimmed = copy.deepcopy(role)
    for rule in trimmed["rules"]:
        rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    trimmed["rules"] = [rule for rule in trimmed["rules"] if rule["verbs"]]
    return trimmed


@contextmanager
def bound_role(cluster: TestCluster, role: dict[str, Any], user: str = "driver") -> Iterator[str]:
    """``role`` (under a unique name) bound to ``user`` for the duration; yields its name."""
    name = f"{role['metadata']['name']}-test-{next(_bindings)}"
    body = {**copy.deepcopy(role), "metadata": {"name": name}}
    admin = cluster.api_client("admin")
    rbac = kubernetes.client.RbacAuthorizationV1Api(admin)
    rbac.create_cluster_role(body)
    rbac.create_cluster_role_binding(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
    )
    try:
        yield name
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
        admin.close()
