"""Least privilege on the real apiserver: the chart's role for a node-local driver
(deploy/chart), and the Node authorizer.

The ``driver`` user of the test server has no rights but those bound here, so what works
below works with exactly the shipped ClusterRole, and what fails fails for lack of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

import resourceslice as rs
from resourceslice.testing import TestCluster, start_cluster, wait_until
from support.controller_env import ControllerEnv, device, driver_name, node_pools, pools

from .rbac_env import bound_role, shipped_role, without_verb

pytestmark = pytest.mark.integration


def create_node(cluster: TestCluster, name: str) -> str:
    admin = cluster.api_client("admin")
    try:
        api = kubernetes.client.CoreV1Api(admin)
        try:
            node = api.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise
            node = api.read_node(name)
        return str(node.metadata.uid)
    finally:
        admin.close()


@pytest.fixture
def driver_env(
    kube_cluster: TestCluster, request: pytest.FixtureRequest
) -> Iterator[ControllerEnv]:
    env = ControllerEnv(kube_cluster, driver_name(request.node.name), "driver")
    try:
        yield env
    finally:
        env.close()


def test_the_shipped_role_is_enough(kube_cluster: TestCluster, driver_env: ControllerEnv) -> None:
    uid = create_node(kube_cluster, "rbac-node")
    owner = rs.Owner(api_version="v1", kind="Node", name="rbac-node")  # uid looked up: get nodes
    with bound_role(kube_cluster, shipped_role()):
        ctrl = driver_env.start_synced(
            node_pools(a=rs.Pool(devices=[device(0)]), b=rs.Pool(devices=[device(1)])), owner=owner
        )
        driver_env.update_synced(ctrl, node_pools(a=rs.Pool(devices=[device(0), device(2)])))
        [published] = driver_env.slices()
        assert published["metadata"]["ownerReferences"][0]["uid"] == uid
        assert published["spec"]["devices"] == [device(0), device(2)]
        assert driver_env.counter.writes() == {"POST": 2, "PUT": 1, "DELETE": 1}
        assert driver_env.errors == []


def test_without_delete_a_clear_403_and_the_rest_works(
    kube_cluster: TestCluster, driver_env: ControllerEnv
) -> None:
    with bound_role(kube_cluster, without_verb(shipped_role(), "delete")):
        ctrl = driver_env.start_synced(
            pools(a=rs.Pool(devices=[device(0)]), b=rs.Pool(devices=[device(1)]))
        )
        # Pool b is dropped (a delete: refused), pool a changes (an update: allowed).
        ctrl.update(pools(a=rs.Pool(devices=[device(0), device(2)])))
        wait_until(lambda: driver_env.errors)
        exc, message = driver_env.errors[0]
        assert isinstance(exc, ApiException) and exc.status == 403
        assert "'b'" in message
        assert 'cannot delete resource "resourceslices"' in json.loads(exc.body)["message"]
        wait_until(lambda: driver_env.slices("a")[0]["spec"]["devices"] == [device(0), device(2)])
        assert len(driver_env.slices("b")) == 1  # still there: nothing could remove it
        assert not ctrl.wait_synced(0.5)  # and the controller says it is not in sync
        assert all(e.status == 403 for e, _ in driver_env.errors if isinstance(e, ApiException))


@pytest.mark.parametrize("verb", ["list", "watch", "create", "update", "delete", "get"])
def test_every_verb_of_the_role_is_needed(
    kube_cluster: TestCluster, driver_env: ControllerEnv, verb: str
) -> None:
    """Minimal: without any one verb of the shipped role, some part of the work is refused."""
    create_node(kube_cluster, "rbac-node")
    owner = rs.Owner(api_version="v1", kind="Node", name="rbac-node")  # "get": the Node's uid
    with bound_role(kube_cluster, without_verb(shipped_role(), verb)):
        ctrl = driver_env.start(
            node_pools(a=rs.Pool(devices=[device(0)]), b=rs.Pool(devices=[device(1)])), owner=owner
        )

        def refused() -> bool:
            return any(
                isinstance(e, ApiException)
                and e.status == 403
                and f"cannot {verb} resource" in json.loads(e.body)["message"]
                for e, _ in driver_env.errors
            )

        # list, watch, create and get are needed to publish; update and delete to change.
        wait_until(lambda: refused() or ctrl.wait_synced(0))
        if not refused():
            ctrl.update(node_pools(a=rs.Pool(devices=[device(0), device(2)])))
        wait_until(refused)


NODES = ("n1", "n2")


@pytest.fixture(scope="module")
def node_cluster() -> Iterator[TestCluster]:
    cluster = start_cluster(extra_users=tuple(f"system:node:{n}=system:nodes" for n in NODES))
    try:
        for node in NODES:
            create_node(cluster, node)
        yield cluster
    finally:
        cluster.close()


def test_node_identity_manages_its_own_node_only(node_cluster: TestCluster) -> None:
    # No RBAC at all: the Node authorizer (and NodeRestriction admission) decide.
    env = ControllerEnv(node_cluster, "node-auth.example.com", "system:node:n1")
    try:
        own = rs.Owner(api_version="v1", kind="Node", name="n1")
        ctrl = env.start_synced(node_pools(n1=rs.Pool(devices=[device(0)])), owner=own)
        env.update_synced(ctrl, node_pools(n1=rs.Pool(devices=[device(0), device(1)])))
        [published] = env.slices()
        assert published["spec"]["nodeName"] == "n1"
        assert published["spec"]["devices"] == [device(0), device(1)]
        ctrl.stop()
        assert all(isinstance(e, ApiException) and e.status == 403 for e, _ in env.errors)

        # The same identity claiming node n2: every request about n2's slices is refused.
        env.errors.clear()
        env.new_counter()
        other = rs.Owner(api_version="v1", kind="Node", name="n2", uid="n2-uid")
        intruder = env.start(node_pools(n2=rs.Pool(devices=[device(0)])), owner=other)
        wait_until(lambda: env.errors)
        assert not intruder.wait_synced(1.0)
        assert all(isinstance(e, ApiException) and e.status == 403 for e, _ in env.errors)
        assert [s["spec"]["nodeName"] for s in env.slices()] == ["n1"]
    finally:
        env.close()
