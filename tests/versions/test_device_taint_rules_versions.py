"""DeviceTaintRules on each release: written in the newest version that serves them (v1 on
1.37, v1alpha3 on 1.33, where the test apiserver switches it on with the DRADeviceTaints
feature gate); 1.32 has none, which the error handler is told."""

from __future__ import annotations

import json
import threading

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice._http import get_json
from resourceslice.testing import TestCluster, wait_until

pytestmark = pytest.mark.integration

DRIVER = "gpu.versions.example.com"
TAINT: rs.DeviceTaint = {"key": "gpu.example.com/unhealthy", "effect": "NoExecute"}
#: The version each release serves DeviceTaintRules in; None: it has none.
SERVED = {"1.37": "v1", "1.33": "v1alpha3", "1.32": None}


def test_rules_in_the_version_each_release_serves(
    release_cluster: TestCluster, release_client: kubernetes.client.ApiClient
) -> None:
    version = SERVED[release_cluster.release]
    errors: list[BaseException] = []
    lock = threading.Lock()

    def handler(exc: BaseException, message: str) -> None:
        with lock:
            errors.append(exc)

    name = f"versions-{release_cluster.release.replace('.', '-')}"
    with rs.DeviceTaintRules(release_client, driver=DRIVER, error_handler=handler) as rules:
        rules.set(name, ("pool-a", "gpu-0"), TAINT)
        if version is None:
            wait_until(lambda: errors, timeout=30)
            assert isinstance(errors[0], rs.NoDeviceTaintRuleAPIError)
            assert "v1beta1" in errors[0].served
            return
        assert rules.wait_synced(timeout=30), errors
        path = f"/apis/resource.k8s.io/{version}/devicetaintrules/{name}"
        stored = json.loads(get_json(release_client, path))
        assert stored["spec"]["deviceSelector"] == {
            "driver": DRIVER,
            "pool": "pool-a",
            "device": "gpu-0",
        }
        # Written in that version: its manager's entry says which.
        assert [e["apiVersion"] for e in stored["metadata"]["managedFields"]] == [
            f"resource.k8s.io/{version}"
        ]
        rules.remove(name)
        assert rules.wait_synced(timeout=30), errors
    assert errors == []
    listed = json.loads(
        get_json(release_client, f"/apis/resource.k8s.io/{version}/devicetaintrules")
    )
    assert [r["metadata"]["name"] for r in listed["items"]] == []
