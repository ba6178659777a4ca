"""A real kube-apiserver + etcd on 127.0.0.1 for tests, and pytest fixtures for it.

Driver authors use it in their own suites, as controller-runtime users use envtest::

    def test_publish(kube_client):          # the pytest plugin is registered on install
        ctrl = resourceslice.start_controller(kube_client, driver="gpu.example.com", ...)

or without pytest::

    with resourceslice.testing.running_cluster() as cluster:
        client = cluster.api_client()

Building the server needs Go (>= 1.26); it happens once per machine.
"""

from __future__ import annotations

from resourceslice.testing.cluster import (
    ClusterError,
    TestCluster,
    build_server,
    running_cluster,
    start_cluster,
)
from resourceslice.testing.polling import wait_until

__all__ = [
    "ClusterError",
    "TestCluster",
    "build_server",
    "running_cluster",
    "start_cluster",
    "wait_until",
]
