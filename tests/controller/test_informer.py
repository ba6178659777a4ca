"""The informer against a scripted ResourceV1Api: list, watch, 410, drops, stop (needs the core)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import kubernetes.client
import pytest

from resourceslice import informer as informer_module
from resourceslice.connection import ApiError
from resourceslice.informer import Backoff, SliceInformer, field_selector
from resourceslice.store import SliceStore
from resourceslice.testing import wait_until


def slice_obj(name: str, pool: str, rv: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {
            "driver": "d.example.com",
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "allNodes": True,
            "devices": [{"name": "dev-0"}],
        },
    }


def list_body(rv: str, *items: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSliceList",
            "metadata": {"resourceVersion": rv},
            "items": list(items),
        }
    ).encode()


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def bookmark(rv: str) -> bytes:
    return event("BOOKMARK", {"kind": "ResourceSlice", "metadata": {"resourceVersion": rv}})


class FakeResponse:
    """A streamed response: its chunks, then an error, the end, or blocking until shut down."""

    def __init__(self, chunks: list[bytes], then: BaseException | str = "block") -> None:
        self.chunks = chunks
        self.then = then
        self.aborted = threading.Event()
        self.ended = False

    def read(self) -> bytes:
        return b"".join(self.chunks)

    def stream(self, amt: int) -> Iterator[bytes]:
        yield from self.chunks
        if isinstance(self.then, BaseException):
            raise self.then
        if self.then == "block":
            self.aborted.wait(30)
        self.ended = True

    def isclosed(self) -> bool:
        return self.ended or self.aborted.is_set()

    def release_conn(self) -> None:
        pass

    def shutdown(self) -> None:
        self.aborted.set()

    def close(self) -> None:
        self.aborted.set()


class FakeApi:
    def __init__(self, lists: list[bytes], watches: list[FakeResponse | ApiError]) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def list_resource_slice(self, **kwargs: Any) -> FakeResponse:
        with self.lock:
            self.calls.append(kwargs)
            if not kwargs.get("watch"):
                return FakeResponse([self.lists.pop(0)], then="end")
            step = self.watches.pop(0) if self.watches else FakeResponse([])
        if isinstance(step, ApiError):
            raise step
        return step

    def watch_versions(self) -> list[str]:
        with self.lock:
            return [c["resource_version"] for c in self.calls if c.get("watch")]


#: Retries within milliseconds: these tests script failures, not a real server to spare.
FAST = (0.001, 0.004)


class Harness:
    def __init__(
        self, api: FakeApi, only_pool: str | None = None, backoff: Backoff | None = None
    ) -> None:
        self.api = api
        self.store = SliceStore()
        self.changes: list[tuple[str | None, str | None]] = []
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.informer = SliceInformer(
            None,  # type: ignore[arg-type]  # no client: the scripted api answers
            driver="d.example.com",
            selector="spec.driver=d.example.com",
            store=self.store,
            on_change=self.on_change,
            on_error=lambda exc, msg: self.errors.append(exc),
            only_pool=only_pool,
            api=api,
            backoff=backoff or Backoff(*FAST),
        )
        self.informer.start()
        assert self.informer.wait_synced(10)

    def on_change(self, old: Any, new: Any) -> None:
        with self.lock:
            self.changes.append(
                (
                    old and f"{old.name}@{old.resource_version}",
                    new and f"{new.name}@{new.resource_version}",
                )
            )

    def names(self) -> dict[str, str]:
        return {
            r.name: r.resource_version
            for p in self.store.pool_names()
            for r in self.store.by_pool(p)
        }


@pytest.fixture
def stop_all() -> Iterator[list[Harness]]:
    harnesses: list[Harness] = []
    yield harnesses
    for h in harnesses:
        h.informer.stop()


def test_field_selector() -> None:
    assert field_selector("d", "node-1", False) == "spec.driver=d,spec.nodeName=node-1"
    assert field_selector("d", None, False) == "spec.driver=d,spec.nodeName="
    assert field_selector("d", "node-1", True) == "spec.driver=d"


def test_list_then_watch_from_its_version(stop_all: list[Harness]) -> None:
    watch = FakeResponse(
        [
            event("ADDED", slice_obj("b", "p", "11")),
            # One event split over two chunks, and two events in one chunk.
            event("MODIFIED", slice_obj("a", "p", "12"))[:20],
            event("MODIFIED", slice_obj("a", "p", "12"))[20:] + bookmark("13"),
            event("DELETED", slice_obj("b", "p", "14")),
        ]
    )
    api = FakeApi([list_body("10", slice_obj("a", "p", "5"))], [watch])
    h = Harness(api)
    stop_all.append(h)
    wait_until(lambda: len(h.changes) == 4)
    assert h.changes == [(None, "a@5"), (None, "b@11"), ("a@5", "a@12"), ("b@14", None)]
    assert h.names() == {"a": "12"}
    first_watch = api.calls[1]
    assert first_watch["watch"] is True
    assert first_watch["allow_watch_bookmarks"] is True
    assert first_watch["resource_version"] == "10"
    assert first_watch["field_selector"] == "spec.driver=d.example.com"


def test_gone_relists_and_synthesises_deletes(stop_all: list[Harness]) -> None:
    gone = event("ERROR", {"kind": "Status", "apiVersion": "v1", "code": 410, "message": "too old"})
    api = FakeApi(
        [
            list_body("10", slice_obj("a", "p", "5"), slice_obj("b", "p", "6")),
            list_body("20", slice_obj("a", "p", "5"), slice_obj("c", "q", "19")),
        ],
        [FakeResponse([gone], then="end")],
    )
    h = Harness(api)
    stop_all.append(h)
    wait_until(lambda: len(h.changes) == 4)
    assert h.changes[2:] == [(None, "c@19"), ("b@6", None)]
    assert h.names() == {"a": "5", "c": "19"}
    wait_until(lambda: api.watch_versions() == ["10", "20"])
    assert h.errors == []


def test_gone_on_watch_start_relists(stop_all: list[Harness]) -> None:
    api = FakeApi(
        [list_body("10"), list_body("30", slice_obj("a", "p", "29"))],
        [ApiError(status=410, reason="Gone")],
    )
    h = Harness(api)
    stop_all.append(h)
    wait_until(lambda: h.names() == {"a": "29"})
    wait_until(lambda: api.watch_versions() == ["10", "30"])


def test_dropped_watch_reconnects_from_the_last_version(stop_all: list[Harness]) -> None:
    dropped = FakeResponse(
        [event("ADDED", slice_obj("a", "p", "11")), bookmark("15")],
        then=ConnectionResetError("peer went away"),
    )
    api = FakeApi([list_body("10")], [dropped])
    h = Harness(api)
    stop_all.append(h)
    wait_until(lambda: api.watch_versions() == ["10", "15"])
    assert [type(e) for e in h.errors] == [ConnectionResetError]
    assert len([c for c in api.calls if not c.get("watch")]) == 1  # no relist needed


def test_retry_now_cuts_the_reconnect_wait_short(stop_all: list[Harness]) -> None:
    # A backoff of ten minutes: only retry_now() can bring the second watch within the test.
    dropped = FakeResponse([], then=ConnectionResetError("apiserver killed"))
    api = FakeApi([list_body("10")], [dropped])
    h = Harness(api, backoff=Backoff(600.0, 600.0))
    stop_all.append(h)
    wait_until(lambda: [type(e) for e in h.errors] == [ConnectionResetError])
    assert api.watch_versions() == ["10"]
    h.informer.retry_now()
    wait_until(lambda: api.watch_versions() == ["10", "10"])


def test_only_pool_filters_and_a_move_out_is_a_delete(stop_all: list[Harness]) -> None:
    watch = FakeResponse(
        [
            event("ADDED", slice_obj("x", "other", "11")),
            event("MODIFIED", slice_obj("a", "other", "12")),
        ]
    )
    api = FakeApi(
        [list_body("10", slice_obj("a", "mine", "5"), slice_obj("b", "other", "6"))], [watch]
    )
    h = Harness(api, only_pool="mine")
    stop_all.append(h)
    wait_until(lambda: len(h.changes) == 2)
    assert h.changes == [(None, "a@5"), ("a@5", None)]
    assert h.names() == {}


def test_another_drivers_slice_is_never_stored(stop_all: list[Harness]) -> None:
    foreign = slice_obj("f", "mine", "11")
    foreign["spec"]["driver"] = "other.example.com"
    watch = FakeResponse([event("ADDED", foreign), event("ADDED", slice_obj("b", "mine", "12"))])
    h = Harness(FakeApi([list_body("10", slice_obj("a", "mine", "5"))], [watch]))
    stop_all.append(h)
    wait_until(lambda: len(h.changes) == 2)
    assert h.changes == [(None, "a@5"), (None, "b@12")]
    assert set(h.names()) == {"a", "b"}


def test_stop_ends_a_blocked_watch(stop_all: list[Harness]) -> None:
    watch = FakeResponse([])  # blocks until shut down
    h = Harness(FakeApi([list_body("10")], [watch]))
    wait_until(lambda: len(h.api.calls) == 2)
    h.informer.stop(timeout=10)
    assert watch.aborted.is_set()
    assert not h.informer.alive


def test_backoff_doubles_with_jitter_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(1.0, 8.0)
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, base in zip(delays, [1, 2, 4, 8, 8, 8]):
        assert base <= delay < 2 * base
    backoff.reset()
    assert 1.0 <= backoff.next_delay() < 2.0


class RecordingBackoff(Backoff):
    def __init__(self) -> None:
        super().__init__(*FAST)
        self.delays: list[float] = []

    def next_delay(self) -> float:
        delay = super().next_delay()
        self.delays.append(delay)
        return delay


def test_an_empty_watch_backs_off_and_one_with_events_resets(stop_all: list[Harness]) -> None:
    initial = FAST[0]
    empty = [FakeResponse([], then="end") for _ in range(3)]
    with_event = FakeResponse([bookmark("11")], then="end")
    backoff = RecordingBackoff()
    api = FakeApi([list_body("10")], [*empty[:2], with_event, empty[2]])
    h = Harness(api, backoff=backoff)
    stop_all.append(h)
    wait_until(lambda: len(api.watch_versions()) == 5)  # the fifth blocks
    # Two empty watches: two growing delays; the bookmark resets, so the next empty one
    # waits the initial delay again (and the watch that delivered resumed at once).
    assert len(backoff.delays) == 3
    first, second, after_reset = backoff.delays
    assert initial <= first < 2 * initial
    assert 2 * initial <= second < 4 * initial
    assert initial <= after_reset < 2 * initial
    assert api.watch_versions() == ["10", "10", "10", "11", "11"]


class ClosingServer(http.server.ThreadingHTTPServer):
    """Answers a list with no slices and ends every watch at once, without an event.

    What an apiserver that is shutting down, or a proxy that closes idle streams, does.
    """

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ClosingHandler)
        self.lock = threading.Lock()
        self.watches = 0


class _ClosingHandler(http.server.BaseHTTPRequestHandler):
    server: ClosingServer

    def do_GET(self) -> None:
        watch = "watch=true" in self.path.lower()
        body = b"" if watch else list_body("10")
        if watch:
            with self.server.lock:
                self.server.watches += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_server_that_ends_every_watch_at_once_gets_few_requests() -> None:
    server = ClosingServer()
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    config = kubernetes.client.Configuration(host=f"http://127.0.0.1:{server.server_port}")
    client = kubernetes.client.ApiClient(config)
    informer = SliceInformer(
        client,
        driver="d.example.com",
        selector="spec.driver=d.example.com",
        store=SliceStore(),
        on_change=lambda old, new: None,
        on_error=lambda exc, msg: None,
    )
    try:
        informer.start()
        assert informer.wait_synced(10)
        # A window, not a synchronisation: count what the informer does in it. Without a
        # backoff it sent hundreds of thousands of watches a second; with client-go's (0.8 s
        # doubling, jittered up to twice that) at most three start within two seconds.
        threading.Event().wait(2.0)
        with server.lock:
            watches = server.watches
        assert 1 <= watches <= 3
    finally:
        informer.stop()
        server.shutdown()
        server.server_close()
        client.close()


class CorePanic(BaseException):
    """Stands in for PyO3's PanicException: a BaseException, not an Exception."""


def test_a_panic_in_the_core_is_reported_and_the_informer_recovers(
    stop_all: list[Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = informer_module.core
    lists = 0

    class PanicsOnce:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def decode_list_chunks(self, chunks: Iterable[bytes]) -> Any:
            nonlocal lists
            lists += 1
            if lists == 1:
                raise CorePanic("called `Option::unwrap()` on a `None` value")
            return real.decode_list_chunks(chunks)

    monkeypatch.setattr(informer_module, "core", PanicsOnce())
    api = FakeApi([list_body("10"), list_body("12", slice_obj("a", "p", "11"))], [])
    h = Harness(api)  # waits for the sync, which only the second list brings
    stop_all.append(h)
    assert [type(e) for e in h.errors] == [CorePanic]
    assert h.names() == {"a": "11"}
    assert h.informer.alive
