"""Hostile input: update() gives a ValidationError or publishes what the apiserver accepts.

Never another exception, never a partial publish; and hostile watch payloads leave the
informer's store as it was.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resourceslice as rs
from resourceslice._backend import core
from resourceslice._http import send_json
from resourceslice._plain import to_plain_pools
from resourceslice.testing import TestCluster, wait_until
from support.controller_env import ControllerEnv, device, pools

DRIVER = "hostile.example.com"

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=80),  # includes lone surrogates: not encodable as UTF-8
    st.binary(max_size=8),
    st.sampled_from(["1Gi", "dev-0", "a" * 70, "1.2.3", "\ud800", "x" * 100_000]),
)
json_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
attribute = st.dictionaries(
    st.sampled_from(["int", "bool", "string", "version", "other"]), json_like, max_size=2
)
devices = st.lists(
    st.one_of(
        json_like,
        st.fixed_dictionaries(
            {"name": st.one_of(st.sampled_from(["dev-0", "dev-1", "Bad_Name", ""]), json_like)},
            optional={
                "attributes": st.dictionaries(st.text(max_size=40), attribute, max_size=3),
                "capacity": st.dictionaries(
                    st.text(max_size=40), st.fixed_dictionaries({"value": json_like}), max_size=3
                ),
                "taints": json_like,
                "consumesCounters": json_like,
            },
        ),
    ),
    max_size=5,
)
pool_names = st.one_of(
    st.sampled_from(["p", "pool-a", "", "UPPER", "x" * 300]), st.text(max_size=20)
)
resources = st.dictionaries(
    pool_names,
    st.builds(
        rs.Pool,
        devices=devices,
        node_selector=st.one_of(st.none(), json_like),
        all_nodes=st.booleans(),
        generation=st.one_of(st.just(0), st.integers(min_value=-5, max_value=2**70)),
    ),
    max_size=3,
)


def accepted_or_rejected(pools_: dict[Any, rs.Pool]) -> rs.Controller | None:
    """The inactive controller's verdict: the controller if accepted, None if rejected."""
    ctrl = rs.start_controller(None, driver=DRIVER)
    try:
        ctrl.update(rs.DriverResources(pools=pools_))
    except rs.ValidationError as exc:
        assert exc.errors and all(isinstance(e, str) for e in exc.errors)
        return None
    return ctrl


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(resources)
def test_update_raises_only_validation_errors(pools_: dict[Any, rs.Pool]) -> None:
    accepted_or_rejected(pools_)


def test_huge_inputs_are_rejected_cleanly() -> None:
    huge = [
        {"name": "d", "attributes": {f"a{i}": {"int": i} for i in range(100_000)}},
        {"name": "d", "attributes": {"a": {"string": "x" * 1_000_000}}},
        {"name": "d", "capacity": {"m": {"value": float("nan")}}},
        {"name": "d", "attributes": {"a": {"int": math.inf}}},
    ]
    deep: Any = {"name": "d"}
    for _ in range(5_000):
        deep = {"name": "d", "attributes": {"a": deep}}
    for bad in [*huge, deep]:
        assert accepted_or_rejected({"p": rs.Pool(devices=[bad])}) is None


@pytest.mark.integration
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(pools_=resources)
def test_accepted_input_is_accepted_by_the_apiserver(
    kube_cluster: TestCluster, pools_: dict[Any, rs.Pool]
) -> None:
    """What update() accepts, the real apiserver accepts too (dry-run creates of the plan)."""
    if accepted_or_rejected(pools_) is None:
        return
    plain, errors = to_plain_pools(rs.DriverResources(pools=pools_))
    desired, errors = core.prepare_desired(DRIVER, plain, 1 << 20)
    assert desired is not None, errors
    client = kube_cluster.api_client("admin")
    try:
        for pool in desired.pool_names():
            for body in core.plan_pool(desired, pool, [], None, None).creates:
                send_json(
                    client, "POST", "/apis/resource.k8s.io/v1/resourceslices?dryRun=All", body
                )
    finally:
        client.close()


@pytest.mark.integration
def test_rejected_update_publishes_nothing(env: ControllerEnv) -> None:
    ctrl = env.start_synced(pools(a=rs.Pool(devices=[device(0)]), b=rs.Pool(devices=[device(1)])))
    before = env.slices()
    env.counter.reset()
    # A valid change to a, a new valid pool c, and one bad device in b: all or nothing.
    with pytest.raises(rs.ValidationError):
        ctrl.update(
            pools(
                a=rs.Pool(devices=[device(0), device(5)]),
                b=rs.Pool(devices=[device(1), {"name": "Not A Label"}]),
                c=rs.Pool(devices=[device(2)]),
            )
        )
    assert ctrl.wait_synced(10)
    assert env.slices() == before
    assert env.counter.writes() == {}


@pytest.mark.integration
def test_hostile_watch_payloads_leave_the_store_alone(env: ControllerEnv) -> None:
    ctrl = env.start_synced(pools(a=rs.Pool(devices=[device(0)])))
    store = ctrl._store
    # Synced means the controller's own writes are known; the watch may deliver them later.
    [record] = wait_until(lambda: store.by_pool("a"))
    hostile = [
        b'{"type":"ADDED","object":{"kind":"ResourceSlice","metadata":{"name":"x"',  # truncated
        b'{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}}}',
        b'{"type":"MODIFIED","object":[]}',
        b"\xff\xfe not utf-8",
        b'{"type":"ADDED","object":{"kind":"ResourceSlice","metadata":{"name":"'
        + record.name.encode()
        + b'"},"spec":"not an object"}}',
    ]
    for line in hostile:
        with pytest.raises(ValueError):
            ctrl._informer._apply(line, record.resource_version)
    assert store.by_pool("a") == [record]
    assert len(store) == 1
