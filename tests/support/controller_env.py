"""What the controller tests on the real apiserver share (integration, reliability, security,
versions): a driver of their own, counted requests. The ``env`` fixture is tests/conftest.py's.

Each test gets a driver name derived from its own name, so tests never see each other's
slices on the shared apiserver, and its slices are deleted at the end.
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
from typing import Any

import kubernetes.client

import resourceslice as rs
from resourceslice._http import pool_manager
from resourceslice.testing import TestCluster
from resourceslice.testing.counting import RequestCounter

SYNC_TIMEOUT = 60.0
#: How long a Gate holds a write for the others to come: only reached when they do not.
GATE_TIMEOUT = 10.0


def device(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"dev-{i}",
        "attributes": {"index": {"int": i}, "model": {"string": "model-a"}},
        "capacity": {"memory": {"value": "1Gi"}},
        **extra,
    }


def library_client(cluster: TestCluster, user: str) -> Any:
    """The client a test hands to the library: a ``kubernetes`` ApiClient, or with
    ``RESOURCESLICE_TEST_CLIENT=connection`` (a pass of ``make test``) the library's own
    Connection, so that the same tests run on both. What a test inspects or edits the
    cluster with stays an ApiClient."""
    if os.environ.get("RESOURCESLICE_TEST_CLIENT") == "connection":
        return cluster.connection(user)
    return cluster.api_client(user)


_twins: list[rs.Connection] = []


def library_twin(api_client: Any) -> Any:
    """What the library gets where a test made an ApiClient: the client itself, or with
    ``RESOURCESLICE_TEST_CLIENT=connection`` a Connection to the same host, as the same
    user, trusting the same CA (closed by :func:`close_twins`)."""
    if os.environ.get("RESOURCESLICE_TEST_CLIENT") != "connection":
        return api_client
    configuration = api_client.configuration
    bearer = configuration.auth_settings()["BearerToken"]["value"]
    twin = rs.Connection(
        configuration.host, token=bearer.split()[-1], ca_file=configuration.ssl_ca_cert
    )
    _twins.append(twin)
    return twin


def close_library_twins() -> None:
    """Close the connections :func:`library_twin` made (after each test: tests/conftest.py)."""
    while _twins:
        _twins.pop().close()


class ControllerEnv:
    def __init__(self, cluster: TestCluster, driver: str, user: str = "admin") -> None:
        self.cluster = cluster
        self.driver = driver
        self.user = user  # whom the controllers' clients authenticate as
        self.errors: list[tuple[BaseException, str]] = []
        # Inspection and external edits go through a client of their own: not counted.
        self.admin = cluster.api_client("admin")
        self.api = kubernetes.client.ResourceV1Api(self.admin)
        self._clients: list[Any] = [self.admin]
        self._controllers: list[rs.Controller] = []
        self.counter = self.new_counter()

    def new_counter(self) -> RequestCounter:
        """A fresh counted client for the next controller (``self.counter`` follows it)."""
        client = library_client(self.cluster, self.user)
        self._clients.append(client)
        self.counter = RequestCounter(client)
        self.client = client  # what the next controller talks through
        return self.counter

    def error_handler(self, exc: BaseException, message: str) -> None:
        self.errors.append((exc, message))

    def start(self, resources: rs.DriverResources, **kwargs: Any) -> rs.Controller:
        kwargs.setdefault("sync_delay", 1.0)
        kwargs.setdefault("error_handler", self.error_handler)
        ctrl = rs.start_controller(self.client, driver=self.driver, resources=resources, **kwargs)
        self._controllers.append(ctrl)
        return ctrl

    def start_synced(self, resources: rs.DriverResources, **kwargs: Any) -> rs.Controller:
        ctrl = self.start(resources, **kwargs)
        assert ctrl.wait_synced(SYNC_TIMEOUT), self.errors
        return ctrl

    def update_synced(self, ctrl: rs.Controller, resources: rs.DriverResources) -> None:
        ctrl.update(resources)
        assert ctrl.wait_synced(SYNC_TIMEOUT), self.errors

    def restart(
        self, ctrl: rs.Controller, resources: rs.DriverResources, **kw: Any
    ) -> rs.Controller:
        """Stop ``ctrl``, start a new one (new client, new counter) and wait until it is idle.

        Idle, not just synced: the informer's first events schedule a resync ``sync_delay``
        later, and "a restart makes no writes" must include what that resync does.
        """
        ctrl.stop()
        self.new_counter()
        started = self.start_synced(resources, **kw)
        assert started.wait_idle(SYNC_TIMEOUT), self.errors
        return started

    def slices(self, pool: str | None = None) -> list[dict[str, Any]]:
        response = self.api.list_resource_slice(
            field_selector=f"spec.driver={self.driver}", _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
        if pool is not None:
            items = [s for s in items if s["spec"]["pool"]["name"] == pool]
        return sorted(items, key=lambda s: s["metadata"]["name"])

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.api.create_resource_slice(body, _preload_content=False)
        created: dict[str, Any] = json.loads(response.data)
        return created

    def replace_slice(self, body: dict[str, Any]) -> None:
        self.api.replace_resource_slice(body["metadata"]["name"], body, _preload_content=False)

    def slice_body(self, name: str, pool: str, generation: int, count: int, **spec: Any) -> Any:
        spec.setdefault("allNodes", True)
        meta = {"generateName": name} if name.endswith("-") else {"name": name}
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": meta,
            "spec": {
                "driver": self.driver,
                "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
                **spec,
            },
        }

    def close(self) -> None:
        for ctrl in self._controllers:
            ctrl.stop()
        self.api.delete_collection_resource_slice(
            field_selector=f"spec.driver={self.driver}", _preload_content=False
        )
        for client in self._clients:
            client.close()


def driver_name(test_name: str) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", test_name.lower().removeprefix("test_")).strip("-")
    return f"{base[:36].strip('-')}.example.com"


def pools(**by_name: rs.Pool) -> rs.DriverResources:
    """``DriverResources`` from keyword pools, deep-copied so tests can keep editing theirs,
    for a controller without a Node owner: a pool that selects no nodes itself is published
    on all nodes (the controller has no default)."""
    copied = copy.deepcopy(by_name)
    for pool in copied.values():
        per_device = any(s.per_device_node_selection for s in pool.slices or ())
        if pool.node_selector is None and not per_device:
            pool.all_nodes = True
    return rs.DriverResources(pools=copied)


def node_pools(**by_name: rs.Pool) -> rs.DriverResources:
    """Like ``pools``, for a Node owner: its pools are on its node."""
    return rs.DriverResources(pools=copy.deepcopy(by_name))


def devices_of(slice_obj: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = slice_obj["spec"].get("devices", [])
    return result


class Gate:
    """Holds each of the next ``parties`` PUTs of ``client`` until that many are in flight
    together; ``failed`` when they never were (a write waited ``GATE_TIMEOUT`` alone)."""

    def __init__(self, client: Any) -> None:
        self._lock = threading.Lock()
        self._barrier: threading.Barrier | None = None
        self._left = 0
        self.failed = False
        pool = pool_manager(client)
        send = pool.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                barrier = self._barrier if method.upper() == "PUT" and self._left > 0 else None
                self._left -= barrier is not None
            if barrier is not None:
                try:
                    barrier.wait(GATE_TIMEOUT)
                except threading.BrokenBarrierError:
                    self.failed = True
            return send(method, url, *args, **kwargs)

        pool.request = request

    def arm(self, parties: int) -> None:
        with self._lock:
            self._barrier = threading.Barrier(parties)
            self._left = parties
