"""A controller without an API client: validates, never publishes (needs the core)."""

from __future__ import annotations

import pytest

import resourceslice as rs


def test_inactive_controller_validates_only() -> None:
    devices = [{"name": "dev-0"}]
    with rs.start_controller(
        None, driver="gpu.example.com", resources=rs.DriverResources({"p": rs.Pool(devices)})
    ) as ctrl:
        with pytest.raises(rs.ValidationError) as info:
            ctrl.update(rs.DriverResources({"p": rs.Pool(devices=[{"name": "a"}, {"name": "a"}])}))
        assert info.value.errors == ['pools["p"].devices[1].name: duplicate device name "a"']
        ctrl.update(rs.DriverResources({"p": rs.Pool(devices=[{"name": "b"}])}))
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
