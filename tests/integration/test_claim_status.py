"""DeviceStatusWriter on the real apiserver: one device's entry of a claim's status.devices is
set, replaced and cleared by server-side apply, and nothing else of the claim changes."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from resourceslice import RequestDeadlineError, ValidationError, aio
from resourceslice._http import pool_manager, request, send_json
from resourceslice.claimstatus import (
    DeviceStatusConflictError,
    DeviceStatusWriter,
    apply_patch_body,
)
from resourceslice.testing import TestCluster
from resourceslice.testing.counting import RequestCounter
from support.claim_env import allocated, claims_path, delete, entries, managers, read, result

pytestmark = pytest.mark.integration

GPU = "gpu.example.com"
NIC = "nic.example.com"
READY = {"type": "Ready", "status": "True", "reason": "Prepared", "message": "8 lanes"}
_names = itertools.count()


@pytest.fixture
def client(kube_cluster: TestCluster) -> Iterator[kubernetes.client.ApiClient]:
    admin = kube_cluster.api_client("admin")
    try:
        yield admin
    finally:
        admin.close()


@pytest.fixture
def claim_name(client: kubernetes.client.ApiClient) -> Iterator[str]:
    """A claim name of the test's own; the claim is deleted after it."""
    name = f"status-{next(_names)}"
    try:
        yield name
    finally:
        try:
            delete(client, name)
        except ApiException as exc:
            assert exc.status == 404


def gpus_and_a_nic(client: kubernetes.client.ApiClient, name: str) -> dict[str, Any]:
    """A claim of two GPUs (one pool) and a NIC of another driver, with metadata others
    wrote and a consumer: what a status write must leave alone."""
    claim = allocated(
        client,
        name,
        [
            result(GPU, "node-1", "gpu-0"),
            result(GPU, "node-1", "gpu-1"),
            result(NIC, "nics", "nic-0"),
        ],
        metadata={"labels": {"team": "ml"}, "annotations": {"note": "keep"}},
    )
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "trainer", "uid": "1234"}]
    path = f"{claims_path()}/{name}/status"
    updated: dict[str, Any] = json.loads(send_json(client, "PUT", path, json.dumps(claim).encode()))
    return updated


def without_devices(claim: dict[str, Any]) -> dict[str, Any]:
    """What a device-status write must not change: all but status.devices and the
    bookkeeping of every write (resourceVersion, managedFields)."""
    meta = {
        k: v for k, v in claim["metadata"].items() if k not in ("resourceVersion", "managedFields")
    }
    status = {k: v for k, v in claim["status"].items() if k != "devices"}
    return {**claim, "metadata": meta, "status": status}


def test_set_replace_and_clear_touch_one_entry(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    claim = gpus_and_a_nic(client, claim_name)
    gpus = DeviceStatusWriter(client, driver=GPU, node_name="node-1")
    nics = DeviceStatusWriter(client, driver=NIC)
    nic = {
        "interfaceName": "eth1",
        "ips": ["10.9.8.7/24", "2001:db8::7/64"],
        "hardwareAddress": "00:11:22:33:44:55",
    }
    nics.set(claim, pool="nics", device="nic-0", network_data=nic)

    data = {"uuid": "GPU-0", "memory": {"total": 80, "unit": "Gi"}}
    stored = gpus.set(claim, pool="node-1", device="gpu-0", conditions=[READY], data=data)
    gpus.set(claim, pool="node-1", device="gpu-1", conditions=[READY])
    now = read(client, claim_name)
    assert stored["metadata"]["resourceVersion"] != now["metadata"]["resourceVersion"]
    found = entries(now)
    assert set(found) == {
        (GPU, "node-1", "gpu-0"),
        (GPU, "node-1", "gpu-1"),
        (NIC, "nics", "nic-0"),
    }
    gpu0 = found[GPU, "node-1", "gpu-0"]
    [condition] = gpu0["conditions"]
    assert {k: condition[k] for k in READY} == READY and condition["lastTransitionTime"]
    assert gpu0["data"] == data
    assert found[NIC, "nics", "nic-0"]["networkData"] == nic
    # One field manager per entry, applied through the status subresource.
    assert managers(now) == {
        "gpu.example.com/node-1/node-1/gpu-0": "Apply",
        "gpu.example.com/node-1/node-1/gpu-1": "Apply",
        "nic.example.com/nics/nic-0": "Apply",
        "OpenAPI-Generator": "Update",  # who allocated and reserved it
    }

    # Replaced: what the writer no longer gives is removed; the other entries stay.
    gpus.set(now, pool="node-1", device="gpu-0", data={"uuid": "GPU-0"})
    found = entries(read(client, claim_name))
    key = {"driver": GPU, "pool": "node-1", "device": "gpu-0"}
    assert found[GPU, "node-1", "gpu-0"] == {**key, "conditions": None, "data": {"uuid": "GPU-0"}}
    assert found[GPU, "node-1", "gpu-1"]["conditions"][0]["type"] == "Ready"
    assert found[NIC, "nics", "nic-0"]["networkData"] == nic

    # Cleared: the entry is gone, the others stay.
    gpus.clear(now, pool="node-1", device="gpu-0")
    after = read(client, claim_name)
    assert set(entries(after)) == {(GPU, "node-1", "gpu-1"), (NIC, "nics", "nic-0")}
    assert "gpu.example.com/node-1/node-1/gpu-0" not in managers(after)
    assert without_devices(after) == without_devices(claim)  # nothing else of the claim changed


def test_writers_of_different_devices_never_undo_each_other(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    """Eight threads, one device each, all at once: every entry lands (a writer that
    applied or replaced the driver's whole list would lose some)."""
    devices = [f"gpu-{i}" for i in range(8)]
    claim = allocated(client, claim_name, [result(GPU, "node-1", d) for d in devices])
    writer = DeviceStatusWriter(client, driver=GPU)
    start = threading.Barrier(len(devices))
    failures: list[BaseException] = []

    def write(device: str) -> None:
        start.wait()
        try:
            writer.set(claim, pool="node-1", device=device, data={"device": device})
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(d,)) for d in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    found = entries(read(client, claim_name))
    assert {key[2]: entry["data"] for key, entry in found.items()} == {
        d: {"device": d} for d in devices
    }


def test_another_writers_field_is_a_conflict_never_overwritten(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    claim = allocated(client, claim_name, [result(GPU, "node-1", "gpu-0")])
    # A driver that writes status.devices with an update, as Go drivers do today.
    theirs = {"driver": GPU, "pool": "node-1", "device": "gpu-0", "data": {"uuid": "GPU-0"}}
    claim["status"]["devices"] = [theirs]
    path = f"{claims_path()}/{claim_name}/status"
    request(
        client, "PUT", path, query=[("fieldManager", "go-driver")], body=json.dumps(claim).encode()
    )
    writer = DeviceStatusWriter(client, driver=GPU, node_name="node-1")

    with pytest.raises(DeviceStatusConflictError) as conflict:
        writer.set(claim, pool="node-1", device="gpu-0", data={"uuid": "GPU-1"})
    assert conflict.value.managers == ["go-driver"]
    assert conflict.value.fields == [
        '.status.devices[device="gpu-0",driver="gpu.example.com",pool="node-1"].data'
    ]
    assert "go-driver" in str(conflict.value)
    assert entries(read(client, claim_name))[GPU, "node-1", "gpu-0"]["data"] == {"uuid": "GPU-0"}

    # Another writer of the same driver (another node's plugin, or a central controller
    # with its own base) is another manager too.
    writer.set(
        claim, pool="node-1", device="gpu-0", data={"uuid": "GPU-0"}
    )  # the same value: shared
    other = DeviceStatusWriter(client, driver=GPU, node_name="node-2")
    with pytest.raises(DeviceStatusConflictError) as conflict:
        other.set(claim, pool="node-1", device="gpu-0", data={"uuid": "GPU-2"})
    assert set(conflict.value.managers) == {"go-driver", "gpu.example.com/node-1/node-1/gpu-0"}
    assert entries(read(client, claim_name))[GPU, "node-1", "gpu-0"]["data"] == {"uuid": "GPU-0"}

    # Conditions are a map by type: writers may each own their own condition of an entry.
    other.set(claim, pool="node-1", device="gpu-0", conditions=[{**READY, "type": "Healthy"}])
    writer.set(claim, pool="node-1", device="gpu-0", data={"uuid": "GPU-0"}, conditions=[READY])
    entry = entries(read(client, claim_name))[GPU, "node-1", "gpu-0"]
    assert sorted(c["type"] for c in entry["conditions"]) == ["Healthy", "Ready"]


def test_a_bad_entry_is_refused_and_nothing_is_sent(
    kube_cluster: TestCluster, claim_name: str, client: kubernetes.client.ApiClient
) -> None:
    claim = allocated(client, claim_name, [result(GPU, "node-1", "gpu-0")])
    counted = kube_cluster.api_client("admin")
    counter = RequestCounter(counted)
    writer = DeviceStatusWriter(counted, driver=GPU)
    try:
        with pytest.raises(ValidationError) as refused:
            writer.set(
                claim,
                pool="node-1",
                device="gpu-0",
                conditions=[{**READY, "reason": "not ready"}, {"type": "Ready", "status": "Yes"}],
                data={"blob": "x" * 10240},
                network_data={"interfaceName": "eth0", "ips": ["10.9.8.7", "2001:0db8::1/64"]},
            )
        assert refused.value.errors == [
            "conditions[0].reason: must start with a letter, then letters, digits or _,: and "
            "end with a letter, digit or _",
            "conditions[1]: duplicate type 'Ready'",
            "conditions[1].status: must be one of True, False, Unknown",
            "conditions[1].reason: is required",
            "data: must be at most 10240 bytes as JSON, not 10251",
            "networkData.ips[0]: must be an address with its prefix length "
            "(10.9.8.7/24, 2001:db8::7/64)",
            "networkData.ips[1]: must be in canonical form ('2001:db8::1/64')",
        ]
        assert str(refused.value).startswith(
            f"invalid status of device gpu.example.com/node-1/gpu-0 for claim default/{claim_name}:"
        )
        with pytest.raises(ValidationError, match="device: must be a DNS label"):
            writer.clear(claim, pool="node-1", device="GPU 0")
        assert counter.requests() == []  # not even the discovery of the served version
    finally:
        counted.close()
    assert entries(read(client, claim_name)) == {}


def test_a_replaced_claim_is_not_written(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    """The claim as the plugin read it names its UID: a claim of the same name that replaced
    it (another pod's) is not given the old one's device status."""
    old = allocated(client, claim_name, [result(GPU, "node-1", "gpu-0")])
    delete(client, claim_name)
    allocated(client, claim_name, [result(GPU, "node-1", "gpu-0")])
    writer = DeviceStatusWriter(client, driver=GPU)
    with pytest.raises(ApiException) as refused:
        writer.set(old, pool="node-1", device="gpu-0", conditions=[READY])
    assert refused.value.status == 422 and "metadata.uid" in refused.value.body
    assert entries(read(client, claim_name)) == {}


def test_a_write_past_its_deadline_is_not_sent(
    kube_cluster: TestCluster, client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    """A leader's write (resourceslice.binding) must be over by the end of its term: one
    whose deadline passed raises and sends nothing; one within it is written."""
    claim = allocated(client, claim_name, [result(GPU, "node-1", "gpu-0")])
    counted = kube_cluster.api_client("admin")
    try:
        writer = DeviceStatusWriter(counted, driver=GPU)
        writer.set(claim, pool="node-1", device="gpu-0", data={"a": 1})  # version discovered
        counter = RequestCounter(counted)
        with pytest.raises(RequestDeadlineError):
            writer.set(claim, pool="node-1", device="gpu-0", conditions=[READY],
                       deadline=time.monotonic() - 0.001)  # fmt: skip
        with pytest.raises(RequestDeadlineError):
            writer.clear(claim, pool="node-1", device="gpu-0", deadline=time.monotonic())
        assert counter.requests() == []
        assert entries(read(client, claim_name))[GPU, "node-1", "gpu-0"]["data"] == {"a": 1}
        writer.set(claim, pool="node-1", device="gpu-0", conditions=[READY],
                   deadline=time.monotonic() + 10)  # fmt: skip
        assert counter.requests() == [("PATCH", f"{claims_path()}/{claim_name}/status")]
    finally:
        counted.close()
    assert entries(read(client, claim_name))[GPU, "node-1", "gpu-0"]["conditions"]


def test_a_device_the_claim_was_not_allocated_is_refused(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    claim = allocated(client, claim_name, [result(GPU, "node-1", "gpu-0")])
    with pytest.raises(ApiException) as refused:
        DeviceStatusWriter(client, driver=GPU).set(claim, pool="node-1", device="gpu-1", data={})
    assert refused.value.status == 422
    assert "must be an allocated device in the claim" in refused.value.body


def test_the_transition_time_changes_with_the_status_only(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    claim = allocated(client, claim_name, [result(GPU, "node-1", "gpu-0")])
    writer = DeviceStatusWriter(client, driver=GPU)
    then = "2020-01-02T03:04:05Z"
    claim = writer.set(
        claim, pool="node-1", device="gpu-0", conditions=[{**READY, "lastTransitionTime": then}]
    )

    def written(conditions: list[dict[str, Any]]) -> dict[str, Any]:
        nonlocal claim
        claim = writer.set(claim, pool="node-1", device="gpu-0", conditions=conditions)
        [condition] = entries(claim)[GPU, "node-1", "gpu-0"]["conditions"]
        return dict(condition)

    assert written([{**READY, "message": "still ready"}])["lastTransitionTime"] == then
    assert written([{**READY, "status": "False", "reason": "Lost"}])["lastTransitionTime"] != then
    # The caller's conditions are not changed.
    given = dict(READY)
    written([given])
    assert given == READY


def test_shared_devices_have_an_entry_per_share(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    """A device allocated several times (consumable capacity) has an entry per share ID:
    the share ID is part of the key, and of the field manager."""
    shares = ["aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa", "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"]
    claim = allocated(client, claim_name, [result(GPU, "node-1", "gpu-0", s) for s in shares])
    writer = DeviceStatusWriter(client, driver=GPU)
    for share in shares:
        writer.set(claim, pool="node-1", device="gpu-0", share_id=share, data={"share": share})
    writer.clear(claim, pool="node-1", device="gpu-0", share_id=shares[0])
    now = read(client, claim_name)
    assert {k: e["data"] for k, e in entries(now).items()} == {
        (GPU, "node-1", "gpu-0", shares[1]): {"share": shares[1]}
    }
    assert f"gpu.example.com/node-1/gpu-0/{shares[1]}" in managers(now)


def test_field_manager_names_fit_the_apiserver(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    """A name over 128 characters is cut and ends with a hash of the whole: still one per
    entry, and accepted."""
    pool = "/".join(["rack-" + "r" * 58] * 3)  # 191 characters: a valid pool name
    claim = allocated(client, claim_name, [result(GPU, pool, "gpu-0"), result(GPU, pool, "gpu-1")])
    writer = DeviceStatusWriter(client, driver=GPU, node_name="node-1")
    names = {writer.field_manager(pool, d) for d in ("gpu-0", "gpu-1")}
    assert len(names) == 2 and all(len(n) == 128 for n in names)
    for device in ("gpu-0", "gpu-1"):
        writer.set(claim, pool=pool, device=device, data={})
    assert names <= set(managers(read(client, claim_name)))
    assert writer.field_manager("p", "d") == "gpu.example.com/node-1/p/d"
    assert (
        DeviceStatusWriter(client, driver=GPU, field_manager="mine").field_manager("p", "d", "s")
        == "mine/p/d/s"
    )


def test_the_patch_is_the_same_json_and_yaml() -> None:
    """The apply patch is read as YAML, which refuses DEL and the C1 controls and folds its
    own line breaks in a string: those are escaped, the body stays JSON."""
    body = apply_patch_body({"s": "a\x7f\x85\u2028\u2029\ufeff𝄞é<"})
    assert body == '{"s":"a\\u007f\\u0085\\u2028\\u2029\\ufeff𝄞é<"}'.encode()
    assert json.loads(body) == {"s": "a\x7f\x85\u2028\u2029\ufeff𝄞é<"}


def test_data_arrives_as_it_was_given(client: kubernetes.client.ApiClient, claim_name: str) -> None:
    claim = allocated(client, claim_name, [result(GPU, "node-1", "gpu-0")])
    data = {
        "s": 'a\x7f\x85\u2028\u2029\ufeff𝄞é<>&\x00\n\t"\\',
        "i": 2**63 - 1,
        "f": 1.5e-7,
        "l": [True, None],
    }
    stored = DeviceStatusWriter(client, driver=GPU).set(
        claim, pool="node-1", device="gpu-0", data=data
    )
    assert entries(stored)[GPU, "node-1", "gpu-0"]["data"] == data


def test_the_async_writer_keeps_the_loop_running(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    """Each write runs off the loop: the loop serves other work while four are in flight
    (the loop's thread never makes a request)."""
    claim = allocated(client, claim_name, [result(GPU, "node-1", f"gpu-{i}") for i in range(4)])
    writer = aio.AsyncDeviceStatusWriter(client, driver=GPU, node_name="node-1")
    loop_threads: set[int] = set()
    request_threads: set[int] = set()
    send = pool_manager(client).request

    def recorded(*args: Any, **kwargs: Any) -> Any:
        request_threads.add(threading.get_ident())
        return send(*args, **kwargs)

    pool_manager(client).request = recorded

    async def main() -> None:
        loop_threads.add(threading.get_ident())
        await asyncio.gather(
            *(writer.set(claim, pool="node-1", device=f"gpu-{i}", data={"i": i}) for i in range(4))
        )
        await writer.clear(claim, pool="node-1", device="gpu-0")

    try:
        asyncio.run(main())
    finally:
        pool_manager(client).request = send
    assert request_threads and not request_threads & loop_threads
    found = entries(read(client, claim_name))
    assert {key[2]: e["data"] for key, e in found.items()} == {
        f"gpu-{i}": {"i": i} for i in (1, 2, 3)
    }


def test_data_of_any_mapping_and_depth_up_to_the_limit(
    client: kubernetes.client.ApiClient, claim_name: str
) -> None:
    """Data is any JSON-like mapping (a MappingProxy, tuples); nested up to 64 levels (this
    library's limit: the apiserver takes deeper data, but the claim is read back with
    Python's json, which recurses)."""
    import types

    claim = allocated(client, claim_name, [result(GPU, "node-1", "gpu-0")])
    writer = DeviceStatusWriter(client, driver=GPU)
    deep: Any = {}
    for _ in range(62):
        deep = {"a": deep}
    data = types.MappingProxyType({"deep": deep, "t": (1, 2)})  # 64 levels
    stored = writer.set(claim, pool="node-1", device="gpu-0", data=data)
    assert entries(stored)[GPU, "node-1", "gpu-0"]["data"] == {"deep": deep, "t": [1, 2]}
    with pytest.raises(ValidationError, match="data: nested more than 64 levels deep"):
        writer.set(claim, pool="node-1", device="gpu-0", data={"a": {"deeper": deep}})
