"""The ClusterRole of deploy/rbac.yaml, bound to a test user, exactly as shipped (or trimmed).

The test apiserver's ``driver`` user has no rights of its own: whatever it can do, it can do
through the binding made here, so a test shows what the shipped role allows.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes.client
import yaml

from resourceslice.testing import TestCluster

RBAC_YAML = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
_bindings = itertools.count()


def shipped_role() -> dict[str, Any]:
    """What a node-local driver binds of deploy/rbac.yaml: both its ClusterRoles
    (resourceslice-publisher, and resourceslice-node-owner for its Node owner), as one."""
    roles = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(RBAC_YAML.read_text())
        if d["kind"] == "ClusterRole"
    }
    publisher, node_owner = roles["resourceslice-publisher"], roles["resourceslice-node-owner"]
    return {**publisher, "rules": [*publisher["rules"], *node_owner["rules"]]}


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
