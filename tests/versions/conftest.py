"""Clusters of each Kubernetes release, and the resource.k8s.io version used on each.

``TARGETS`` is the matrix: each release's newest DRA version (what discovery picks), plus
1.37 pinned to v1beta1, the only way to see the ``basic`` wrapping with every field of
today's API (taints, counters, binding conditions) stored by a real apiserver.
``RESOURCESLICE_RELEASES`` narrows it (see :func:`resourceslice.testing.plugin.tested_releases`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

from resourceslice import _apiversion
from resourceslice._apiversion import ResourceSliceAPI, SliceVersion
from resourceslice.testing import TestCluster, start_cluster
from resourceslice.testing.plugin import tested_releases
from support.controller_env import ControllerEnv, driver_name

#: (release, resource.k8s.io version the controller uses there).
TARGETS = [
    (release, version)
    for release, version in [("1.37", "v1beta1"), ("1.33", "v1beta2"), ("1.32", "v1beta1")]
    if release in tested_releases()
]


def generated_api(version: SliceVersion, client: kubernetes.client.ApiClient) -> Any:
    """The ``kubernetes`` client's API class of ``version``, for the tests' own edits."""
    apis = {
        "v1": kubernetes.client.ResourceV1Api,
        "v1beta2": kubernetes.client.ResourceV1beta2Api,
        "v1beta1": kubernetes.client.ResourceV1beta1Api,
    }
    return apis[version.version](client)


#: For the tests of a module: run once per target, the cluster shared per release.
on_each_target = pytest.mark.parametrize(
    ("release_cluster", "api_version"),
    TARGETS,
    indirect=["release_cluster"],
    ids=[f"{release}-{version}" for release, version in TARGETS],
    scope="session",
)


#: The same matrix on a cluster of the test module's own, for tests that kill or reconfigure it.
on_each_target_own_cluster = pytest.mark.parametrize(
    ("own_cluster", "api_version"),
    TARGETS,
    indirect=["own_cluster"],
    ids=[f"{release}-{version}" for release, version in TARGETS],
    scope="module",
)


@pytest.fixture(scope="module")
def own_cluster(request: pytest.FixtureRequest) -> Iterator[TestCluster]:
    """A cluster of ``request.param``'s release for this module only."""
    cluster = start_cluster(release=request.param)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, api_version: str) -> SliceVersion:
    """The version the controllers of the test use: discovery may pick it and no newer one.

    On the older releases that is what discovery finds anyway; on 1.37 it leaves v1 out.
    """
    order = _apiversion.VERSIONS
    monkeypatch.setattr(_apiversion, "VERSIONS", order[order.index(api_version) :])
    return SliceVersion(api_version)


class VersionedEnv(ControllerEnv):
    """ControllerEnv whose own inspection and edits speak the served version.

    Tests see and write v1 objects, as on a v1 cluster: what ``served`` stores is converted.
    """

    def __init__(self, cluster: TestCluster, driver: str, served: SliceVersion) -> None:
        super().__init__(cluster, driver)
        self.served = served
        self.api = generated_api(served, self.admin)
        self.slices_api = ResourceSliceAPI(self.admin)

    def slice_body(self, name: str, pool: str, generation: int, count: int, **spec: Any) -> Any:
        """In the served apiVersion, which ``self.api`` requires; devices stay v1 (as given)."""
        body = super().slice_body(name, pool, generation, count, **spec)
        body["apiVersion"] = self.served.api_version
        return body

    def slices(self, pool: str | None = None) -> list[dict[str, Any]]:
        data = self.slices_api.list(f"spec.driver={self.driver}")
        items: list[dict[str, Any]] = json.loads(data)["items"]
        if pool is not None:
            items = [s for s in items if s["spec"]["pool"]["name"] == pool]
        return sorted(items, key=lambda s: s["metadata"]["name"])

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        created = self.slices_api.create(json.dumps(body).encode())
        result: dict[str, Any] = json.loads(created)
        return result

    def replace_slice(self, body: dict[str, Any]) -> None:
        self.slices_api.update(body["metadata"]["name"], json.dumps(body).encode())


@pytest.fixture(name="env")
def versioned_env(
    release_cluster: TestCluster, served: SliceVersion, request: pytest.FixtureRequest
) -> Iterator[ControllerEnv]:
    # The test's own name without the target: the drivers of the targets never share a cluster.
    environment = VersionedEnv(release_cluster, driver_name(request.node.originalname), served)
    try:
        yield environment
    finally:
        environment.close()
