"""kubelet's call deadline reaches the plugin's work: the claim reads, the wait for the
serialization lock, and coroutine callbacks end by it, so a call kubelet gave up on holds
neither a gRPC worker nor the lock. Calls are made as kubelet makes them, with a deadline,
by a gRPC client of the test's own (kubelet's harness always waits long)."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import grpc
import pytest

from resourceslice import kubeletplugin
from resourceslice.kubeletplugin._pb import dra_v1_pb2, dra_v1_pb2_grpc
from resourceslice.testing import TestCluster
from resourceslice.testing.faultproxy import Fault, FaultProxy
from support.kubelet_env import NAMESPACE, Node, RecordingPlugin, uid

pytestmark = pytest.mark.integration

#: kubelet's deadline for the call it gives up on; the next one has time enough.
GIVEN_UP = 2.0
PATIENT = 30.0


def prepare(helper: kubeletplugin.Helper, claim: dict[str, Any], timeout: float) -> Any:
    with grpc.insecure_channel(f"unix://{helper.plugin_socket_path}") as channel:
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        ref = dra_v1_pb2.Claim(namespace=NAMESPACE, uid=uid(claim), name=claim["metadata"]["name"])
        return stub.NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]), timeout=timeout
        )


def given_up(helper: kubeletplugin.Helper, claim: dict[str, Any]) -> str:
    """A prepare kubelet gives up on after GIVEN_UP seconds: how it ended for kubelet.

    The plugin ends its work at the same deadline, so its answer (the claim failed) may
    still come in before kubelet stops waiting.
    """
    try:
        answer = prepare(helper, claim, GIVEN_UP)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        return "deadline exceeded"
    assert answer.claims[uid(claim)].error != ""  # timed out, or kubelet's deadline passed
    return "failed in time"


@pytest.mark.parametrize(
    "stalled",
    ["/resourceclaims/", "/apis/resource.k8s.io"],
    ids=["the claim", "the API discovery before it"],
)
def test_a_claim_read_ends_by_kubelets_deadline(
    node: Node, kube_cluster: TestCluster, stalled: str
) -> None:
    """The apiserver never answers the claim read (or the discovery of the version to read it
    in, the first time): the one gRPC worker is free again at kubelet's deadline, not 60 s
    (four times, with urllib3's retries) later."""
    with FaultProxy(kube_cluster) as proxy:
        client, direct = proxy.api_client(), node.client
        try:
            node.client = client  # the plugin reads claims through the proxy
            helper = node.start(max_workers=1)
            node.client = direct  # the test's own claims do not
            first, second = node.claim("a", ["dev-0"]), node.claim("b", ["dev-1"])
            proxy.rule = lambda method, path: (
                Fault(stall=float("inf"))
                if (path.endswith(stalled) if stalled.startswith("/apis") else stalled in path)
                else None
            )
            given_up(helper, first)
            proxy.rule = lambda method, path: None
            answer = prepare(helper, second, PATIENT)
            assert answer.claims[uid(second)].error == ""
            assert [d.device_name for d in answer.claims[uid(second)].devices] == ["dev-1"]
        finally:
            helper.stop()  # before the proxy goes
            client.close()


class StuckOnce(RecordingPlugin):
    """An asynchronous driver whose first prepare never ends by itself."""

    def __init__(self, driver: str) -> None:
        super().__init__(driver)
        self.calls = 0
        self.cancelled = False

    async def prepare_resource_claims(  # type: ignore[override]
        self, claims: list[dict[str, Any]]
    ) -> dict[str, kubeletplugin.PrepareResult]:
        self.calls += 1
        if self.calls == 1:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        return super().prepare_resource_claims(claims)


def test_a_call_kubelet_gave_up_on_no_longer_holds_the_lock(node: Node) -> None:
    plugin = StuckOnce(node.driver)
    helper = node.start(plugin)
    first, second = node.claim("a", ["dev-0"]), node.claim("b", ["dev-1"])
    given_up(helper, first)
    answer = prepare(helper, second, PATIENT)
    assert answer.claims[uid(second)].error == ""
    assert plugin.cancelled
    assert [msg for _, msg in node.errors] == ["prepare_resource_claims failed"]


def test_a_lock_wait_ends_by_kubelets_deadline(node: Node) -> None:
    """Another instance (a Go build) holds the lock past kubelet's deadline: the call fails
    in time, and once that instance lets go, the next call takes the lock (the abandoned
    wait hands it straight on)."""
    from kubeletplugin.test_streams_and_locks import go_lock_holder

    plugin = RecordingPlugin(node.driver)
    helper = node.start(plugin, rolling_update_uid="0c5e2b7a-python")
    lock_file = node.dir / "plugins" / node.driver / "serialize.lock"
    first, second = node.claim("a", ["dev-0"]), node.claim("b", ["dev-1"])
    go = subprocess.Popen(
        [str(go_lock_holder()), str(lock_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert go.stdout is not None and go.stdout.readline() == b"locked\n"
        given_up(helper, first)
        assert plugin.prepare_calls == []
        assert go.stdin is not None
        go.stdin.close()
        answer = prepare(helper, second, PATIENT)
        assert answer.claims[uid(second)].error == ""
    finally:
        go.kill()
        go.wait()
        for pipe in (go.stdin, go.stdout):
            if pipe is not None:
                pipe.close()
