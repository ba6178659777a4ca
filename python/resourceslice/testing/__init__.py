"""A real kube-apiserver + etcd on 127.0.0.1 for tests, and pytest fixtures for it.

Driver authors use it in their own suites, as controller-runtime users use envtest::

    def test_publish(kube_client):          # the pytest plugin is registered on install
        ctrl = resourceslice.start_controller(kube_client, driver="gpu.example.com", ...)

or without pytest::

    with resourceslice.testing.running_cluster() as cluster:
        client = cluster.api_client()

For a driver's whole chain — a Pod scheduled onto a node, its claim allocated from the
published slices, prepared by the driver's kubelet plugin, its containers given the CDI
edits and run by runc (as root) — :mod:`resourceslice.testing.dra` adds kube-scheduler, the
resourceclaim controller and simulated kubelets, all Kubernetes' own code (the
``dra_cluster`` fixture, or ``running_dra_cluster()``).

The server is Kubernetes 1.37 (serving ``resource.k8s.io`` v1, v1beta2 and v1beta1); older
releases are there to test against clusters without v1: ``running_cluster(release="1.33")``
(newest DRA version v1beta2), ``release="1.32"`` (v1beta1), or the ``release_cluster``
fixture, which runs a test once on each of :func:`releases`.

Building the server needs Go (>= 1.26); it happens once per machine.
"""

from __future__ import annotations

from resourceslice.testing.cluster import (
    DEFAULT_RELEASE,
    ClusterError,
    TestCluster,
    build_server,
    releases,
    running_cluster,
    start_cluster,
)
from resourceslice.testing.dra import (
    ContainerEdits,
    ContainerProcess,
    DRACluster,
    Eviction,
    PodNotPrepared,
    PreparedPod,
    SimulatedNode,
    build_dra_cluster,
    running_dra_cluster,
    start_dra_cluster,
)
from resourceslice.testing.polling import wait_until

__all__ = [
    "DEFAULT_RELEASE",
    "ClusterError",
    "ContainerEdits",
    "ContainerProcess",
    "DRACluster",
    "Eviction",
    "PodNotPrepared",
    "PreparedPod",
    "SimulatedNode",
    "TestCluster",
    "build_dra_cluster",
    "build_server",
    "releases",
    "running_cluster",
    "running_dra_cluster",
    "start_cluster",
    "start_dra_cluster",
    "wait_until",
]
