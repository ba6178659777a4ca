"""Hooks for driver authors' tests, against kubelet's own code (the kubelet harness): gRPC
interceptors on the plugin's services, and ``resourceslice.testing.pluginfaults``'s faults —
registration that fails, prepare and unprepare that block, fail or take long."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, Callable

import grpc
import kubernetes.client
import pytest

from resourceslice import kubeletplugin
from resourceslice.kubeletplugin._pb import dra_v1_pb2, dra_v1_pb2_grpc
from resourceslice.testing import wait_until
from resourceslice.testing.kubelet import KubeletHarness
from resourceslice.testing.pluginfaults import PluginFaults
from support.kubelet_env import RecordingPlugin, allocated_claim, delete_claim, driver_name, uid

pytestmark = pytest.mark.integration

DRA_V1 = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
GET_INFO = "/pluginregistration.Registration/GetInfo"
NOTIFY = "/pluginregistration.Registration/NotifyRegistrationStatus"
PREPARE = DRA_V1 + "NodePrepareResources"
UNPREPARE = DRA_V1 + "NodeUnprepareResources"
WATCH = "/v1.DRAResourceHealth/NodeWatchResources"


class Node:
    """One test's driver on kubelet's directories; the helpers and claims it made go at the
    end."""

    def __init__(self, request: pytest.FixtureRequest, node_dir: Path, client: Any) -> None:
        self.driver = driver_name(request.node.name)
        self.dir = node_dir
        self.client = client
        self.plugin = RecordingPlugin(self.driver)
        self.helpers: list[kubeletplugin.Helper] = []
        self.claims: list[str] = []

    def start(self, plugin: Any = None, **kwargs: Any) -> kubeletplugin.Helper:
        (self.dir / "registry").mkdir(exist_ok=True)
        helper = kubeletplugin.start(
            plugin or self.plugin,
            driver=self.driver,
            api_client=self.client,
            registrar_dir=str(self.dir / "registry"),
            plugin_data_dir=str(self.dir / "plugins" / self.driver),
            **kwargs,
        )
        self.helpers.append(helper)
        return helper

    def claim(self, name: str, devices: list[str]) -> dict[str, Any]:
        claim = allocated_claim(self.client, self.driver, f"{self.driver[:20]}-{name}", devices)
        self.claims.append(claim["metadata"]["name"])
        return claim

    def close(self) -> None:
        for helper in self.helpers:
            helper.stop()
        for name in self.claims:
            delete_claim(self.client, name)


@pytest.fixture
def node_type() -> type[Node]:
    """This module's node for the shared ``node`` fixture."""
    return Node


def devices_of(answer: dict[str, Any], claim: dict[str, Any]) -> list[str]:
    return [d["deviceName"] for d in answer["claims"][uid(claim)]["devices"]]


def prepared_uids(plugin: RecordingPlugin) -> list[list[str]]:
    """The claims of each call the driver's prepare callback got."""
    with plugin.lock:
        return [[uid(c) for c in call] for call in plugin.prepare_calls]


class HealthPlugin(RecordingPlugin):
    """Reports one healthy device, then waits until the stream ends."""

    def __init__(self, driver: str) -> None:
        super().__init__(driver)
        self.end: queue.Queue[None] = queue.Queue()

    def watch_health(self) -> Iterator[list[kubeletplugin.DeviceHealth]]:
        yield [kubeletplugin.DeviceHealth("node-1", "dev-0", kubeletplugin.HealthStatus.HEALTHY)]
        self.end.get()


class Counting(grpc.ServerInterceptor):
    """grpc's own kind of interceptor: given every call, unary or streaming; records each
    unary call as it runs, a stream as it is looked up."""

    def __init__(self, seen: list[tuple[str, str]]) -> None:
        self.seen = seen

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method = handler_call_details.method
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            self.seen.append(("grpc", method))
            return handler
        inner = handler.unary_unary

        def counted(request: Any, context: grpc.ServicerContext) -> Any:
            self.seen.append(("grpc", method))
            return inner(request, context)

        wrapped: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(
            counted, handler.request_deserializer, handler.response_serializer
        )
        return wrapped


def test_interceptors_see_each_call_kubelet_makes_in_the_order_given(
    node: Node, kubelet: KubeletHarness
) -> None:
    seen: list[tuple[str, str]] = []

    def recording(name: str) -> kubeletplugin.InterceptorFunction:
        def intercept(
            request: Any, context: grpc.ServicerContext, method: str, handler: kubeletplugin.Handler
        ) -> Any:
            seen.append((name, method))
            response = handler(request, context)
            seen.append((f"{name} done", method))
            return response

        return intercept

    def streams(
        request: Any, context: grpc.ServicerContext, method: str, handler: kubeletplugin.Handler
    ) -> Iterator[Any]:
        seen.append(("stream", method))
        for response in handler(request, context):
            seen.append(("stream sent", method))
            yield response

    plugin = HealthPlugin(node.driver)
    try:
        helper = node.start(
            plugin,
            interceptors=[recording("outer"), Counting(seen), recording("inner")],
            stream_interceptors=[streams],
        )
        kubelet.wait_registered(node.driver)
        assert helper.wait_registered(timeout=30)
        # kubelet opens the health stream once the plugin is registered.
        kubelet.wait_event(lambda e: e["event"] == "health" and e["driver"] == node.driver)
        claim = node.claim("one", ["dev-0"])
        assert devices_of(kubelet.prepare(node.driver, [claim]), claim) == ["dev-0"]
        assert kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""
    finally:
        plugin.end.put(None)

    # Unary functions see the unary calls, on both sockets; the first given is outermost.
    assert [m for who, m in seen if who == "outer"] == [GET_INFO, NOTIFY, PREPARE, UNPREPARE]
    assert [who for who, m in seen if m == PREPARE] == [
        "outer",
        "grpc",
        "inner",
        "inner done",
        "outer done",
    ]
    # The stream function sees the health stream, and each response as it goes out; grpc's
    # own kind sees every call.
    assert [who for who, m in seen if m == WATCH] == ["grpc", "stream", "stream sent"]
    # (kubelet opens the stream as it registers the plugin, before or after notifying it).
    assert sorted(m for who, m in seen if who == "grpc") == sorted(
        [GET_INFO, NOTIFY, WATCH, PREPARE, UNPREPARE]
    )


def test_an_interceptor_fails_a_call_as_a_servicer_does(
    node: Node, kubelet: KubeletHarness
) -> None:
    def deny_prepare(
        request: Any, context: grpc.ServicerContext, method: str, handler: kubeletplugin.Handler
    ) -> Any:
        if method == PREPARE:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "node is draining")
        return handler(request, context)

    node.start(interceptors=[deny_prepare])
    kubelet.wait_registered(node.driver)
    claim = node.claim("one", ["dev-0"])
    answer = kubelet.prepare(node.driver, [claim])
    # kubelet's call failed with the interceptor's status; the driver never saw it.
    assert "PermissionDenied" in answer["error"] and "node is draining" in answer["error"]
    assert prepared_uids(node.plugin) == []
    assert kubelet.unprepare(node.driver, [claim])["claims"][uid(claim)]["error"] == ""


def test_interceptors_of_the_wrong_kind_are_refused_before_serving(node_dir: Path) -> None:
    with kubernetes.client.ApiClient() as client:
        for wrong in ({"interceptors": [42]}, {"stream_interceptors": [Counting([])]}):
            with pytest.raises(TypeError):
                kubeletplugin.start(
                    RecordingPlugin("x.example.com"),
                    driver="x.example.com",
                    api_client=client,
                    registrar_dir=str(node_dir),
                    plugin_data_dir=str(node_dir / "data"),
                    **wrong,
                )
    assert list(node_dir.iterdir()) == []


def test_a_failing_get_info_keeps_kubelet_retrying_until_it_passes(
    node: Node, kubelet: KubeletHarness
) -> None:
    faults = PluginFaults()
    failing = faults.fail_get_info("devices not discovered yet")
    helper = node.start(interceptors=[faults])
    # kubelet asked, was refused, and asked again (0.5 s later: its backoff) ...
    failing.wait_hit(2)
    # ... never registering the plugin, and saying why in its log.
    assert kubelet.events("register") == []
    assert helper.registration_status is None
    log = kubelet.log_path.read_text()
    assert "failed to get plugin info using RPC GetInfo" in log
    assert "devices not discovered yet" in log

    failing.clear()
    kubelet.wait_registered(node.driver)
    assert helper.wait_registered(timeout=30)
    claim = node.claim("one", ["dev-0"])
    assert devices_of(kubelet.prepare(node.driver, [claim]), claim) == ["dev-0"]


def test_a_failing_notify_registration_has_kubelet_take_the_plugin_out_and_retry(
    node: Node, kubelet: KubeletHarness
) -> None:
    faults = PluginFaults()
    failing = faults.fail_notify_registration()
    helper = node.start(interceptors=[faults])
    # kubelet registers the plugin before it notifies it; the notification failing, it takes
    # the plugin out again, and tries anew.
    failing.wait_hit(2)
    wait_until(lambda: len(kubelet.events("deregister")) >= 2, timeout=30)
    assert len(kubelet.events("register")) >= 2
    # The helper never heard kubelet's answer (as Go's: the failure comes first).
    assert helper.registration_status is None
    assert not helper.wait_registered(timeout=0)

    failing.clear()
    assert helper.wait_registered(timeout=30)
    assert helper.registration_status is not None
    assert helper.registration_status.plugin_registered
    claim = node.claim("one", ["dev-0"])
    assert devices_of(kubelet.prepare(node.driver, [claim]), claim) == ["dev-0"]


def test_prepare_faults_act_on_the_chosen_claims_only(node: Node, kubelet: KubeletHarness) -> None:
    faults = PluginFaults()
    node.start(interceptors=[faults])
    kubelet.wait_registered(node.driver)
    a = node.claim("a", ["dev-0"])
    b = node.claim("b", ["dev-1"])

    # Failed, every claim: kubelet has the error for each; the driver was not called.
    with faults.fail_prepare(error="no ASIC firmware"):
        answer = kubelet.prepare(node.driver, [a, b])
    assert {u: r["error"] for u, r in answer["claims"].items()} == {
        uid(a): "no ASIC firmware",
        uid(b): "no ASIC firmware",
    }
    assert prepared_uids(node.plugin) == []

    # Failed: a's result is the error, b is prepared; the driver was called for b alone.
    with faults.fail_prepare(a["metadata"]["name"], "firmware update running") as failing:
        answer = kubelet.prepare(node.driver, [a, b])
    assert answer["claims"][uid(a)]["error"] == "firmware update running"
    assert answer["claims"][uid(a)]["devices"] == []
    assert devices_of(answer, b) == ["dev-1"]
    assert prepared_uids(node.plugin) == [[uid(b)]]
    assert failing.hits == 1
    assert faults.faults() == []

    # Blocked: kubelet waits in a's prepare until the fault is cleared; b's prepare is served
    # meanwhile (a blocked call holds none of the helper's locks).
    blocked = faults.block_prepare(a)
    with futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(kubelet.prepare, node.driver, [a])
        blocked.wait_hit()
        assert devices_of(kubelet.prepare(node.driver, [b]), b) == ["dev-1"]
        assert not pending.done()
        assert uid(a) not in node.plugin.prepared
        blocked.clear()
        assert devices_of(pending.result(timeout=30), a) == ["dev-0"]
    assert prepared_uids(node.plugin)[-1] == [uid(a)]

    # Delayed: the call is served, that much later.
    with faults.delay_prepare(f"default/{a['metadata']['name']}", seconds=1.0) as delayed:
        start = time.monotonic()
        assert devices_of(kubelet.prepare(node.driver, [a]), a) == ["dev-0"]
        assert time.monotonic() - start >= 1.0
    assert delayed.hits == 1


def test_unprepare_faults_act_on_the_chosen_claims_only(
    node: Node, kubelet: KubeletHarness
) -> None:
    faults = PluginFaults()
    node.start(interceptors=[faults])
    kubelet.wait_registered(node.driver)
    a = node.claim("a", ["dev-0"])
    b = node.claim("b", ["dev-1"])
    assert "error" not in kubelet.prepare(node.driver, [a, b])

    # Failed, for claims a predicate picks: b stays prepared, kubelet has the error.
    with faults.fail_unprepare(lambda ref: ref.uid == uid(b), "device busy"):
        answer = kubelet.unprepare(node.driver, [a, b])
    assert answer["claims"] == {
        uid(a): {"error": "", "devices": None},
        uid(b): {"error": "device busy", "devices": None},
    }
    assert node.plugin.prepared == {uid(b)}

    # Blocked until cleared.
    blocked = faults.block_unprepare(
        kubeletplugin.ClaimRef("default", b["metadata"]["name"], uid(b))
    )
    with futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(kubelet.unprepare, node.driver, [b])
        blocked.wait_hit()
        assert not pending.done()
        assert node.plugin.prepared == {uid(b)}
        blocked.clear()
        assert pending.result(timeout=30)["claims"][uid(b)]["error"] == ""
    assert node.plugin.prepared == set()

    # Delayed.
    with faults.delay_unprepare(b, seconds=1.0):
        start = time.monotonic()
        assert kubelet.unprepare(node.driver, [b])["claims"][uid(b)]["error"] == ""
        assert time.monotonic() - start >= 1.0


class Unpreparing:
    """Unprepares anything at once (no claim is read: no apiserver needed)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def prepare_resource_claims(self, claims: list[Any]) -> dict[str, Any]:
        raise AssertionError("not called")

    def unprepare_resource_claims(
        self, claims: list[kubeletplugin.ClaimRef]
    ) -> dict[str, BaseException | None]:
        self.calls.append([c.uid for c in claims])
        return {c.uid: None for c in claims}


def test_a_held_call_ends_at_the_callers_deadline_and_frees_its_thread(node_dir: Path) -> None:
    """One gRPC thread: a call blocked (or delayed) past its deadline must end then, or the
    plugin serves nothing else until the fault is cleared."""
    (node_dir / "registry").mkdir()
    faults = PluginFaults()
    plugin = Unpreparing()
    with kubernetes.client.ApiClient() as client:
        helper = kubeletplugin.start(
            plugin,
            driver="held.example.com",
            api_client=client,
            registrar_dir=str(node_dir / "registry"),
            plugin_data_dir=str(node_dir / "data"),
            interceptors=[faults],
            max_workers=1,
        )
    try:

        def unprepare(name: str, timeout: float) -> str:
            with grpc.insecure_channel(f"unix://{helper.plugin_socket_path}") as channel:
                stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
                claim = dra_v1_pb2.Claim(namespace="default", name=name, uid=name)
                answer = stub.NodeUnprepareResources(
                    dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=timeout
                )
            return str(answer.claims[name].error)

        blocked = faults.block_unprepare("stuck")
        delayed = faults.delay_unprepare("slow", seconds=3600)
        for name, fault in (("stuck", blocked), ("slow", delayed)):
            with pytest.raises(grpc.RpcError) as raised:
                unprepare(name, timeout=0.5)
            assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert fault.hits == 1
            # Served by the one thread: the held call gave it back.
            assert unprepare("other", timeout=10) == ""
        assert plugin.calls == [["other"], ["other"]]
        assert [f.active for f in faults.faults()] == [True, True]
    finally:
        faults.clear()
        helper.stop()


def test_a_fault_not_hit_in_time_says_which() -> None:
    faults = PluginFaults()
    fault = faults.block_prepare("never")
    with pytest.raises(AssertionError, match=r"block NodePrepareResources of 'never': 0 of 1"):
        fault.wait_hit(timeout=0.01)
    with pytest.raises(TypeError):
        faults.fail_prepare(42)  # type: ignore[arg-type]
