"""A controller without an API client: validates, never publishes (needs the core)."""

from __future__ import annotations

import pytest

import resourceslice as rs


def test_inactive_controller_validates_only() -> None:
    devices = [{"name": "dev-0"}]
    everywhere = {"all_nodes": True}
    with rs.start_controller(
        None,
        driver="gpu.example.com",
        resources=rs.DriverResources({"p": rs.Pool(devices, **everywhere)}),
    ) as ctrl:
        with pytest.raises(rs.ValidationError) as info:
            ctrl.update(rs.DriverResources({"p": rs.Pool([{"name": "a"}, {"name": "a"}])}))
        assert info.value.errors == [
            'pools["p"]: no node selection: a Node owner, nodeSelector, allNodes, or slices '
            "with perDeviceNodeSelection is required",
            'pools["p"].devices[1]: duplicate device name "a"',
        ]
        ctrl.update(rs.DriverResources({"p": rs.Pool(devices=[{"name": "b"}], **everywhere)}))
        assert not ctrl.wait_synced(0)
        assert ctrl.stats() == rs.Stats()


def test_start_rejects_invalid_resources_listing_every_problem() -> None:
    resources = rs.DriverResources(
        {"p": rs.Pool(devices=[{"name": "a"}], slices=[]), "q": rs.Pool(devices=[{"name": "B"}])}
    )
    with pytest.raises(rs.ValidationError) as info:
        rs.start_controller(None, driver="gpu.example.com", resources=resources)
    assert [e.split(":")[0] for e in info.value.errors][:1] == ['pools["p"]']
    assert any(e.startswith('pools["q"].devices[0].name') for e in info.value.errors)


def test_reconcile_pool_with_name_rejects_other_pools() -> None:
    with pytest.raises(rs.ValidationError) as info:
        rs.start_controller(
            None,
            driver="gpu.example.com",
            resources=rs.DriverResources({"a": rs.Pool(devices=[]), "b": rs.Pool(devices=[])}),
            reconcile_pool_with_name="a",
        )
    assert info.value.errors == [
        'pools["b"]: only pool "a" is reconciled (reconcile_pool_with_name)'
    ]


def test_node_owner_rejects_cluster_wide_pools() -> None:
    node = rs.Owner(api_version="v1", kind="Node", name="node-1")
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "x", "operator": "Exists"}]}]}
    resources = rs.DriverResources(
        {
            "a": rs.Pool(devices=[], all_nodes=True),
            "b": rs.Pool(devices=[], node_selector=selector),
            "c": rs.Pool(slices=[rs.Slice(devices=[], per_device_node_selection=True)]),
            "node-1": rs.Pool(devices=[]),
        }
    )
    with pytest.raises(rs.ValidationError) as info:
        rs.start_controller(None, driver="gpu.example.com", owner=node, resources=resources)
    assert [e.split(":")[0] for e in info.value.errors] == [
        'pools["a"]',
        'pools["b"]',
        'pools["c"]',
    ]
    # Reconciling one pool by name is how a Node owner publishes a cluster-wide pool.
    rs.start_controller(
        None,
        driver="gpu.example.com",
        owner=node,
        resources=rs.DriverResources({"a": rs.Pool(devices=[], all_nodes=True)}),
        reconcile_pool_with_name="a",
    ).stop()
