"""Controller.health() and resourceslice.metrics on the real apiserver: a pool that fails
(its Node owner does not exist yet), then recovers once the Node is created."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import kubernetes.client
import pytest
from prometheus_client import CollectorRegistry

import resourceslice as rs
from resourceslice import aio, metrics
from resourceslice._pycore.plan import slice_name
from resourceslice.testing import wait_until
from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    device,
    node_pools,
    pools,
)

pytestmark = pytest.mark.integration


def value(registry: CollectorRegistry, name: str, driver: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"driver": driver, **labels})


def test_a_failing_pool_shows_in_health_and_metrics_until_it_recovers(
    env: ControllerEnv,
) -> None:
    node = env.driver.split(".")[0][:40] + "-node"
    registry = CollectorRegistry()
    ctrl = env.start(
        node_pools(p=rs.Pool(devices=[device(i) for i in range(3)])),
        owner=rs.Owner(api_version="v1", kind="Node", name=node),
    )
    collector = metrics.register(ctrl, registry=registry)
    health = wait_until(lambda: (h := ctrl.health()).failing and h)
    assert list(health.failing) == ["p"]
    # One line, as /healthz serves it to whoever connects: no response headers or body.
    assert health.failing == {"p": f'404 nodes "{node}" not found'}
    with metrics.MetricsServer("127.0.0.1", 0, registry, collector) as server:
        host, port = server.address
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=30)
        assert refused.value.code == 503
        assert json.loads(refused.value.read())[env.driver]["failing"] == health.failing
    assert (health.synced, health.synced_once, health.alive) == (False, False, True)
    assert health.last_sync_time is None and not health.ok
    assert health.informer_connected  # the informer lists before the workers start
    m = {
        "failing": value(registry, "resourceslice_pools", env.driver, state="failing"),
        "synced": value(registry, "resourceslice_pools", env.driver, state="synced"),
        "errors": value(registry, "resourceslice_errors_total", env.driver, kind="ApiError"),
        "failed syncs": value(registry, "resourceslice_syncs_total", env.driver, result="error"),
        "devices": value(registry, "resourceslice_published_devices", env.driver),
        "last sync": value(registry, "resourceslice_last_sync_timestamp_seconds", env.driver),
    }
    assert m["failing"] == 1 and m["synced"] == 0 and m["devices"] == 0, m
    assert m["errors"] >= 1 and m["failed syncs"] >= 1 and m["last sync"] is None, m

    core = kubernetes.client.CoreV1Api(env.admin)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    try:
        assert ctrl.wait_synced(SYNC_TIMEOUT)
        health = ctrl.health()
        assert health.ok and health.synced and health.synced_once and not health.failing
        assert health.last_sync_time is not None
        assert value(registry, "resourceslice_pools", env.driver, state="synced") == 1
        assert value(registry, "resourceslice_pools", env.driver, state="failing") == 0
        assert value(registry, "resourceslice_published_devices", env.driver) == 3
        created = value(
            registry, "resourceslice_writes_total", env.driver, verb="create", outcome="success"
        )
        assert created == 1
        assert value(registry, "resourceslice_sync_duration_seconds_count", env.driver) == sum(
            value(registry, "resourceslice_syncs_total", env.driver, result=r) or 0
            for r in ("success", "error")
        )
        ctrl.stop()
        health = ctrl.health()
        assert not health.alive and not health.synced
        assert value(registry, "resourceslice_synced", env.driver) == 0
        collector.remove(ctrl)
        assert value(registry, "resourceslice_synced", env.driver) is None
    finally:
        core.delete_node(node)


def test_an_asyncio_controller_is_collected_too(env: ControllerEnv) -> None:
    registry = CollectorRegistry()

    async def main() -> None:
        resources = pools(p=rs.Pool(devices=[device(0)]))
        async with aio.start_controller(env.client, driver=env.driver, resources=resources) as c:
            metrics.register(c, registry=registry)
            assert await c.wait_synced(SYNC_TIMEOUT)
            assert c.health().synced and c.health() == c.controller.health()
            assert value(registry, "resourceslice_synced", env.driver) == 1
            assert value(registry, "resourceslice_informer_connected", env.driver) == 1

    asyncio.run(main())


def test_a_create_refused_with_409_is_counted_as_a_conflict(env: ControllerEnv) -> None:
    registry = CollectorRegistry()
    owner = rs.Owner(api_version="v1", kind="Node", name="node-a", uid="uid-a")
    # Our first slice's name, held by a slice of another node, which the Node owner's
    # informer does not watch: the create is refused.
    name = slice_name(0, env.driver, ("v1", "Node", "node-a", "uid-a"), "node-a")
    env.create_slice(
        {
            **env.slice_body(name, "node-a", 1, 1),
            "spec": {
                "driver": env.driver,
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "node-b",
            },
        }
    )
    ctrl = env.start(node_pools(**{"node-a": rs.Pool(devices=[device(0)])}), owner=owner)
    metrics.register(ctrl, registry=registry)
    wait_until(
        lambda: value(
            registry, "resourceslice_writes_total", env.driver, verb="create", outcome="conflict"
        )
    )
    assert ctrl.health().failing["node-a"].startswith("SliceExistsError: pool 'node-a'")
    assert value(registry, "resourceslice_errors_total", env.driver, kind="SliceExistsError")
    created = value(
        registry, "resourceslice_writes_total", env.driver, verb="create", outcome="success"
    )
    assert created == 0
