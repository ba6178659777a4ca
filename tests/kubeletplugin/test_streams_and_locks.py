"""Health streams across kubelet reconnects, the serialization lock shared with a Go build
of the same driver during a rolling update, and what the plugin answers in corner cases
(an empty error text, a refused registration).

Health streams are opened as kubelet opens them, a ``NodeWatchResources`` call on the
plugin's socket, by a gRPC client of the test's own: it can hang up a hundred times in a
row, which kubelet does over a node's lifetime.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubeletplugin.test_kubelet import GatedPlugin, lock_waiters
from resourceslice import kubeletplugin
from resourceslice.kubeletplugin._pb import (
    health_v1_pb2,
    health_v1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from resourceslice.testing import wait_until
from resourceslice.testing.cluster import build_go_binary
from resourceslice.testing.kubelet import KubeletHarness
from support.kubelet_env import Node, RecordingPlugin, uid

pytestmark = pytest.mark.integration

HEALTHY = kubeletplugin.HealthStatus.HEALTHY


def report() -> list[kubeletplugin.DeviceHealth]:
    return [kubeletplugin.DeviceHealth("node-1", "dev-0", HEALTHY)]


class CountingHealth(RecordingPlugin):
    """Counts its live ``watch_health()`` iterators. ``asynchronous``: one report, then an
    await that never ends; else a report every 20 ms."""

    def __init__(self, driver: str, asynchronous: bool) -> None:
        super().__init__(driver)
        self.asynchronous = asynchronous
        self.live = 0
        self._count = threading.Lock()

    def _change(self, by: int) -> None:
        with self._count:
            self.live += by

    def watch_health(self) -> Any:
        return self._async() if self.asynchronous else self._plain()

    async def _async(self) -> AsyncIterator[list[kubeletplugin.DeviceHealth]]:
        self._change(1)
        try:
            yield report()
            await asyncio.Event().wait()
        finally:
            self._change(-1)

    def _plain(self) -> Iterator[list[kubeletplugin.DeviceHealth]]:
        self._change(1)
        stop = threading.Event()
        try:
            while True:
                yield report()
                stop.wait(0.02)
        finally:
            self._change(-1)


class Stream:
    """One NodeWatchResources call, as kubelet makes it."""

    def __init__(self, socket_path: str) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket_path}")
        stub = health_v1_pb2_grpc.DRAResourceHealthStub(self.channel)
        self.call = stub.NodeWatchResources(health_v1_pb2.NodeWatchResourcesRequest())

    def close(self) -> None:
        self.call.cancel()
        self.channel.close()


def health_threads() -> int:
    return sum(t.name == "kubeletplugin-health" for t in threading.enumerate())


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "plain"])
def test_a_hundred_reconnects_leave_one_iterator(node: Node, asynchronous: bool) -> None:
    plugin = CountingHealth(node.driver, asynchronous)
    helper = node.start(plugin)
    threads = threading.active_count()
    for _ in range(100):
        stream = Stream(helper.plugin_socket_path)
        assert len(next(stream.call).devices) == 1
        stream.close()
    last = Stream(helper.plugin_socket_path)
    try:
        next(last.call)
        wait_until(lambda: plugin.live == 1 and health_threads() == 1, timeout=30)
        # The gRPC server's own threads come and go; what is left per stream must not.
        assert threading.active_count() <= threads + 5
    finally:
        last.close()
    wait_until(lambda: plugin.live == 0 and health_threads() == 0, timeout=30)


class FailingHealth(RecordingPlugin):
    def __init__(self, driver: str, error: Exception) -> None:
        super().__init__(driver)
        self.error = error

    def watch_health(self) -> Iterator[list[kubeletplugin.DeviceHealth]]:
        yield report()
        raise self.error


def test_a_raising_watch_health_fails_the_stream(node: Node) -> None:
    """Not OK: kubelet would take the end for a clean one and reconnect every 5 s forever."""
    helper = node.start(FailingHealth(node.driver, RuntimeError("sensor bus gone")))
    stream = Stream(helper.plugin_socket_path)
    try:
        assert len(next(stream.call).devices) == 1
        with pytest.raises(grpc.RpcError) as failed:
            next(stream.call)
        assert failed.value.code() == grpc.StatusCode.UNKNOWN
        assert "sensor bus gone" in str(failed.value.details())
    finally:
        stream.close()
    assert [msg for _, msg in node.errors] == ["watch_health failed"]


class DecliningHealth(RecordingPlugin):
    def watch_health(self) -> Iterator[list[kubeletplugin.DeviceHealth]]:
        raise kubeletplugin.HealthNotSupportedError("no sensors on this node")
        yield report()  # a generator, as drivers write them


def test_health_not_supported_answers_unimplemented(node: Node) -> None:
    helper = node.start(DecliningHealth(node.driver))
    stream = Stream(helper.plugin_socket_path)
    try:
        with pytest.raises(grpc.RpcError) as failed:
            next(stream.call)
        assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        stream.close()
    assert node.errors == []


def go_lock_holder() -> Path:
    """The Go program that takes the lock as Go's kubeletplugin helper does (built once)."""
    return build_go_binary(
        Path(__file__).parent / "golock",
        binary="golock",
        cache_name="golock",
        what="the Go serialization lock holder",
    )


def test_a_go_build_of_the_driver_holding_the_lock_serializes_prepare(
    node: Node, kubelet: KubeletHarness
) -> None:
    """During a rolling update from a Go build of the driver, the Go pod holds the lock of
    a prepare under way: the Python pod's prepare waits for it."""
    order: list[str] = []
    plugin = GatedPlugin(node.driver, "python", order)
    plugin.gate.set()
    helper = node.start(plugin, rolling_update_uid="5e8a1c07-python")
    kubelet.wait_registered(node.driver, helper.plugin_socket_path)
    lock_file = node.dir / "plugins" / node.driver / "serialize.lock"
    claim = node.claim("a", ["dev-0"])
    go = subprocess.Popen(
        [str(go_lock_holder()), str(lock_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert go.stdout is not None and go.stdout.readline() == "locked\n"
        with futures.ThreadPoolExecutor(1) as pool:
            prepared = pool.submit(kubelet.prepare, node.driver, [claim])
            wait_until(lambda: lock_waiters(lock_file) == 1, timeout=60)
            assert order == []
            assert go.stdin is not None
            go.stdin.close()  # the Go pod's prepare is over
            assert prepared.result()["claims"][uid(claim)]["error"] == ""
        assert order == ["python-enter", "python-exit"]
    finally:
        go.kill()
        go.wait()
        for pipe in (go.stdin, go.stdout):
            if pipe is not None:
                pipe.close()


class EmptyErrorPlugin(RecordingPlugin):
    """Answers every claim with ``error=""`` beside its devices."""

    def prepare_resource_claims(
        self, claims: list[dict[str, Any]]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        results = super().prepare_resource_claims(claims)
        return {
            claim_uid: kubeletplugin.PrepareResult(devices=result.devices, error="")
            for claim_uid, result in results.items()
        }


def test_an_empty_error_means_success_in_prepare_as_in_unprepare(
    node: Node, kubelet: KubeletHarness
) -> None:
    node.start(EmptyErrorPlugin(node.driver))
    kubelet.wait_registered(node.driver)
    claim = node.claim("a", ["dev-0"])
    prepared = kubelet.prepare(node.driver, [claim])["claims"][uid(claim)]
    assert prepared["error"] == ""
    assert [d["deviceName"] for d in prepared["devices"]] == ["dev-0"]


def test_a_refused_registration_is_answered_with_an_error(node: Node) -> None:
    """As Go's registration server: kubelet's refusal is recorded, reported, and answered
    with an error."""
    helper = node.start()
    channel = grpc.insecure_channel(f"unix://{helper.registrar_socket_path}")
    try:
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)
        with pytest.raises(grpc.RpcError) as failed:
            stub.NotifyRegistrationStatus(
                pluginregistration_v1_pb2.RegistrationStatus(
                    plugin_registered=False, error="version not supported"
                )
            )
    finally:
        channel.close()
    assert failed.value.code() == grpc.StatusCode.UNKNOWN
    assert "version not supported" in str(failed.value.details())
    assert not helper.wait_registered(0)
    assert [msg for _, msg in node.errors] == ["kubelet refused the plugin's registration"]
