"""What the kubelet plugin tests share (and the docs and security tests that run a plugin):
allocated claims on the real apiserver, a plugin that records its calls, and one test's node
with its plugin's helpers (the ``node`` fixture of tests/kubeletplugin/conftest.py)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from resourceslice import kubeletplugin
from resourceslice._http import send_json

NAMESPACE = "default"
POOL = "node-1"


def claims_path(version: str = "v1") -> str:
    return f"/apis/resource.k8s.io/{version}/namespaces/{NAMESPACE}/resourceclaims"


def driver_name(test_name: str) -> str:
    """A driver of the test's own: claims and slices of tests never mix."""
    label = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"{label}.example.com"


def allocated_claim(
    client: ApiClient,
    driver: str,
    name: str,
    devices: Sequence[str],
    pool: str = POOL,
    version: str = "v1",
    config: Sequence[dict[str, Any]] = (),
    class_config: Sequence[dict[str, Any]] = (),
    node_name: str | None = None,
) -> dict[str, Any]:
    """A ResourceClaim for ``devices`` of ``driver``, created and allocated as the scheduler
    would (status.allocation written through the status subresource), in ``version`` of
    resource.k8s.io; on ``node_name`` when given (the scheduler's node selector for devices
    local to one node: the apiserver associates the claim with that node by it).

    ``config``: the claim's ``spec.devices.config``; ``class_config``: the DeviceClass's
    ``spec.config``. The allocation carries both as the scheduler copies them: the class's
    first (``FromClass``, for the request), then the claim's (``FromClaim``)."""
    request: dict[str, Any] = {"deviceClassName": driver, "count": len(devices)}
    # v1beta1 has the request's fields inline; v1beta2 and v1 under "exactly".
    request = (
        {"name": "req", **request} if version == "v1beta1" else {"name": "req", "exactly": request}
    )
    spec: dict[str, Any] = {"devices": {"requests": [request]}}
    if config:
        spec["devices"]["config"] = list(config)
    body = {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }
    claim: dict[str, Any] = json.loads(
        send_json(client, "POST", claims_path(version), json.dumps(body).encode())
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "req", "driver": driver, "pool": pool, "device": device}
                    for device in devices
                ],
                "config": [
                    *({"source": "FromClass", "requests": ["req"], **c} for c in class_config),
                    *({"source": "FromClaim", **c} for c in config),
                ],
            }
        }
    }
    if node_name is not None:
        field = {"key": "metadata.name", "operator": "In", "values": [node_name]}
        claim["status"]["allocation"]["nodeSelector"] = {
            "nodeSelectorTerms": [{"matchFields": [field]}]
        }
    path = f"{claims_path(version)}/{name}/status"
    allocated: dict[str, Any] = json.loads(
        send_json(client, "PUT", path, json.dumps(claim).encode())
    )
    return allocated


def delete_claim(client: ApiClient, name: str, version: str = "v1") -> None:
    send_json(client, "DELETE", f"{claims_path(version)}/{name}", b"{}")


def uid(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["uid"])


class RecordingPlugin:
    """Prepares each allocated device of a claim as itself, with one CDI device ID; records
    every call (the claims as it got them) and what is prepared now."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.lock = threading.Lock()
        self.prepare_calls: list[list[dict[str, Any]]] = []
        self.unprepare_calls: list[list[kubeletplugin.ClaimRef]] = []
        self.prepared: set[str] = set()
        self.fail_with: BaseException | None = None

    def prepare_resource_claims(
        self, claims: list[dict[str, Any]]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        with self.lock:
            self.prepare_calls.append(claims)
            if self.fail_with is not None:
                raise self.fail_with
            results = {}
            for claim in claims:
                devices = [
                    kubeletplugin.PreparedDevice(
                        pool_name=r["pool"],
                        device_name=r["device"],
                        requests=[r["request"]],
                        cdi_device_ids=[f"{self.driver}/device={r['device']}"],
                    )
                    for r in claim["status"]["allocation"]["devices"]["results"]
                ]
                results[uid(claim)] = kubeletplugin.PrepareResult(devices=devices)
                self.prepared.add(uid(claim))
            return results

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        with self.lock:
            self.unprepare_calls.append(claims)
            if self.fail_with is not None:
                raise self.fail_with
            for claim in claims:
                self.prepared.discard(claim.uid)
            return {claim.uid: None for claim in claims}


class Node:
    """One test's node: its driver, its plugin, the helpers started (stopped at the end)."""

    def __init__(self, request: pytest.FixtureRequest, node_dir: Path, client: Any) -> None:
        self.driver = driver_name(request.node.name)
        self.dir = node_dir
        self.client = client
        self.plugin = RecordingPlugin(self.driver)
        self.helpers: list[kubeletplugin.Helper] = []
        self.claims: list[str] = []
        self.errors: list[tuple[BaseException, str]] = []

    def start(self, plugin: Any = None, **kwargs: Any) -> kubeletplugin.Helper:
        kwargs.setdefault("registrar_dir", str(self.dir / "registry"))
        Path(kwargs["registrar_dir"]).mkdir(exist_ok=True)  # kubelet's, made by kubelet
        kwargs.setdefault("plugin_data_dir", str(self.dir / "plugins" / self.driver))
        kwargs.setdefault("error_handler", lambda exc, msg: self.errors.append((exc, msg)))
        kwargs.setdefault("api_client", self.client)
        helper = kubeletplugin.start(plugin or self.plugin, driver=self.driver, **kwargs)
        self.helpers.append(helper)
        return helper

    def claim(self, name: str, devices: list[str]) -> dict[str, Any]:
        claim = allocated_claim(
            self.client, self.driver, f"{self.driver.split('.')[0][:40]}-{name}", devices
        )
        self.claims.append(claim["metadata"]["name"])
        return claim

    def close(self) -> None:
        for helper in self.helpers:
            helper.stop()
        for name in self.claims:
            delete_claim(self.client, name)
