"""Allocated ResourceClaims on the real apiserver, as kube-scheduler leaves them: what the
device-status tests write to."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes.client

from resourceslice._http import get_json, send_json

NAMESPACE = "default"


def claims_path(version: str = "v1", namespace: str = NAMESPACE) -> str:
    return f"/apis/resource.k8s.io/{version}/namespaces/{namespace}/resourceclaims"


def result(driver: str, pool: str, device: str, share_id: str | None = None) -> dict[str, Any]:
    """An allocation result of request ``req``."""
    found = {"request": "req", "driver": driver, "pool": pool, "device": device}
    return {**found, "shareID": share_id} if share_id else found


def node_selector(node: str) -> dict[str, Any]:
    """The node selector kube-scheduler gives a claim of devices local to ``node``: one term
    matching ``metadata.name`` (the apiserver associates the claim with that node by it)."""
    field = {"key": "metadata.name", "operator": "In", "values": [node]}
    return {"nodeSelectorTerms": [{"matchFields": [field]}]}


def allocated(
    client: kubernetes.client.ApiClient,
    name: str,
    results: Sequence[Mapping[str, Any]],
    *,
    node: str | None = None,
    version: str = "v1",
    namespace: str = NAMESPACE,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A claim created in ``version`` of resource.k8s.io and allocated ``results`` (on
    ``node`` when given) through the status subresource; as the apiserver returned it."""
    exact = {"deviceClassName": "class", "count": len(results)}
    requested = (
        {"name": "req", **exact} if version == "v1beta1" else {"name": "req", "exactly": exact}
    )
    body = {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, **(metadata or {})},
        "spec": {"devices": {"requests": [requested]}},
    }
    path = claims_path(version, namespace)
    claim: dict[str, Any] = json.loads(send_json(client, "POST", path, json.dumps(body).encode()))
    allocation: dict[str, Any] = {"devices": {"results": [dict(r) for r in results]}}
    if node is not None:
        allocation["nodeSelector"] = node_selector(node)
    claim["status"] = {"allocation": allocation}
    data = send_json(client, "PUT", f"{path}/{name}/status", json.dumps(claim).encode())
    stored: dict[str, Any] = json.loads(data)
    return stored


def read(
    client: kubernetes.client.ApiClient,
    name: str,
    version: str = "v1",
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    claim: dict[str, Any] = json.loads(
        get_json(client, f"{claims_path(version, namespace)}/{name}")
    )
    return claim


def delete(client: kubernetes.client.ApiClient, name: str, version: str = "v1") -> None:
    send_json(client, "DELETE", f"{claims_path(version)}/{name}", b"{}")


def entries(claim: Mapping[str, Any]) -> dict[tuple[str, ...], dict[str, Any]]:
    """The claim's ``status.devices`` by key: (driver, pool, device[, shareID])."""
    found = {}
    for entry in (claim.get("status") or {}).get("devices") or ():
        key = (entry["driver"], entry["pool"], entry["device"])
        found[key + ((entry["shareID"],) if entry.get("shareID") else ())] = entry
    return found


def managers(claim: Mapping[str, Any]) -> dict[str, str]:
    """Each field manager of the claim's status and how it wrote (Apply, Update)."""
    return {
        m["manager"]: m["operation"]
        for m in claim["metadata"].get("managedFields") or ()
        if m.get("subresource") == "status"
    }
