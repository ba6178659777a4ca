"""The device-status vectors (tests/vectors/claimstatus.json) sent to the real apiserver.

For each vector a claim is created and allocated the device its entry names, as the scheduler
would, and the entry is applied to its status as DeviceStatusWriter applies it (server-side
apply, ``application/apply-patch+yaml``) but without the checks: the apiserver's verdict must be
the vector's, and ours. Where Kubernetes refuses the allocation itself (a name no device can
have), no such entry can ever be written: the vector must be one our checks refuse.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from resourceslice._http import request, send_json
from resourceslice.claimstatus import apply_patch_body, device_status_problems
from resourceslice.testing import TestCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VECTORS: list[dict[str, Any]] = json.loads((ROOT / "tests/vectors/claimstatus.json").read_text())[
    "vectors"
]


def our_path(server_path: str) -> str:
    """Our path of the server's ``status.devices[0]...``: relative to the entry."""
    return re.sub(r"^status\.devices\[0\]\.?", "", server_path)


def paths(problems: list[str]) -> set[str]:
    return {problem.split(": ", 1)[0] for problem in problems}


CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def allocated(client: kubernetes.client.ApiClient, name: str, entry: dict[str, Any]) -> str:
    """A claim allocated the device ``entry`` names; "" when the apiserver refuses that
    allocation (then its message)."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "req", "exactly": {"deviceClassName": "c"}}]}},
    }
    claim = json.loads(send_json(client, "POST", CLAIMS, json.dumps(body).encode()))
    result = {
        "request": "req",
        **{k: entry[k] for k in ("driver", "pool", "device", "shareID") if k in entry},
    }
    claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    try:
        send_json(client, "PUT", f"{CLAIMS}/{name}/status", json.dumps(claim).encode())
    except ApiException as exc:
        assert exc.status == 422, exc
        return str(json.loads(exc.body)["message"])
    return ""


def apply(
    client: kubernetes.client.ApiClient, name: str, entry: dict[str, Any]
) -> ApiException | None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "status": {"devices": [entry]},
    }
    try:
        request(
            client,
            "PATCH",
            f"{CLAIMS}/{name}/status",
            query=[("fieldManager", "vectors")],
            body=apply_patch_body(body),
            content_type="application/apply-patch+yaml",
        )
    except ApiException as exc:
        return exc
    return None


def server_paths(exc: ApiException) -> set[str]:
    causes = (json.loads(exc.body).get("details") or {}).get("causes") or []
    return {our_path(c["field"]) for c in causes if c.get("field")}


@pytest.fixture(scope="module")
def client(kube_cluster: TestCluster) -> Iterator[kubernetes.client.ApiClient]:
    admin = kube_cluster.api_client("admin")
    try:
        yield admin
    finally:
        admin.close()


@pytest.mark.parametrize("index", range(len(VECTORS)), ids=[v["name"] for v in VECTORS])
def test_the_apiserver_agrees(client: kubernetes.client.ApiClient, index: int) -> None:
    vector = VECTORS[index]
    entry = vector["entry"]
    ours = device_status_problems(entry)
    name = f"vector-{index}"
    try:
        refused_allocation = allocated(client, name, entry)
        if refused_allocation:
            assert not vector["valid"] and ours, refused_allocation
            return
        refusal = apply(client, name, entry)
        assert (refusal is None) == vector["valid"] == (not ours), (refusal and refusal.body, ours)
        if refusal is None:
            return
        if refusal.status != 422:
            # Refused before validation: the patch (400) or its conversion to the typed
            # object (500: a member of the wrong type, a duplicate key of a list map).
            assert refusal.status in (400, 500), refusal.body
            return
        if vector.get("decodeError"):
            return
        expected = {our_path(e["path"]) for e in vector["errors"]}
        assert server_paths(refusal) == expected == paths(ours), refusal.body
    finally:
        send_json(client, "DELETE", f"{CLAIMS}/{name}", b"{}")


def test_every_vector_is_sent() -> None:
    """The parametrisation above takes each vector once, by its unique name."""
    assert len(VECTORS) > 150
    assert len({v["name"] for v in VECTORS}) == len(VECTORS)
