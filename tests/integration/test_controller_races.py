"""Another client deletes (and recreates) or labels a slice right after the controller
wrote it.

Regression tests for kubernetes/kubernetes#140011: during a rolling upgrade of a DRA driver,
slices that the restarted driver had just updated were deleted at once (by the kubelet),
and the controller, trusting the copy of its write in the mutation cache, never recreated
them. Here the other client acts inside the controller's own request, between the server's
answer and the controller reading it, and the controller reads the answer only once its
watch has delivered the delete: the order in which the copy of the write hid the delete.
The mutation cache TTL is far longer than the tests' timeout, so waiting for it to expire
cannot be what heals.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice._http import pool_manager
from resourceslice.testing import wait_until
from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
    device,
    devices_of,
    pools,
)

pytestmark = pytest.mark.integration

LONG_TTL = 600.0


class AfterWrite:
    """Runs ``action(name)`` once, inside the first ``method`` request of the client that
    succeeds after :attr:`armed` is set: after the server answered, before the controller
    sees the answer. ``action`` returns a fragment of the watch event it caused; the answer
    is held until the controller's own informer has taken in that event, so the controller
    reads the answer of its write only after its watch showed the action's outcome."""

    def __init__(
        self, client: kubernetes.client.ApiClient, method: str, action: Callable[[str], bytes]
    ) -> None:
        self.done = threading.Event()
        self.armed = threading.Event()
        # What the informer's watches delivered since the action: it has applied all of it.
        self._taken_in = b""
        self._taken_in_changed = threading.Condition()
        pool = pool_manager(client)
        send = pool.request

        def request(verb: str, url: str, *args: Any, **kwargs: Any) -> Any:
            response = send(verb, url, *args, **kwargs)
            if "watch=true" in url.lower():
                self._follow(response)
            elif (
                verb == method
                and self.armed.is_set()
                and not self.done.is_set()
                and 200 <= response.status < 300
            ):
                self.done.set()
                event = action(json.loads(response.data)["metadata"]["name"])
                with self._taken_in_changed:
                    assert self._taken_in_changed.wait_for(
                        lambda: event in self._taken_in, SYNC_TIMEOUT
                    )
            return response

        pool.request = request

    def _follow(self, response: Any) -> None:
        stream = response.stream

        def followed(amt: int) -> Iterator[bytes]:
            for chunk in stream(amt):
                yield chunk
                # Resumed: the informer has applied every event of the chunk.
                if self.done.is_set():
                    with self._taken_in_changed:
                        self._taken_in += chunk
                        self._taken_in_changed.notify_all()

        response.stream = followed


DELETED = b'"type":"DELETED"'


def delete(env: ControllerEnv, name: str) -> bytes:
    env.api.delete_resource_slice(name, _preload_content=False)
    return DELETED


def settled(env: ControllerEnv, ctrl: rs.Controller, want: list[dict[str, Any]]) -> None:
    """The cluster holds exactly one slice with ``want``, and the controller is idle."""

    def exact() -> bool:
        published = env.slices()
        return (
            ctrl.wait_idle(SYNC_TIMEOUT)
            and len(published) == 1
            and devices_of(published[0]) == want
        )

    wait_until(exact, SYNC_TIMEOUT, describe=lambda: f"{env.slices()}; errors {env.errors}")


def test_update_then_at_once_a_delete_by_another_client(env: ControllerEnv) -> None:
    hook = AfterWrite(
        env.client,
        "PUT",
        lambda name: delete(env, name),
    )
    ctrl = env.start_synced(
        pools(p=rs.Pool(devices=[device(0), device(1)])), mutation_cache_ttl=LONG_TTL
    )
    [before] = env.slices()
    hook.armed.set()
    want = [device(0), device(2)]
    ctrl.update(pools(p=rs.Pool(devices=want)))
    assert hook.done.wait(SYNC_TIMEOUT)
    settled(env, ctrl, want)
    # Recreated under the same name, as a new object.
    [after] = env.slices()
    assert after["metadata"]["name"] == before["metadata"]["name"]
    assert after["metadata"]["uid"] != before["metadata"]["uid"]


def test_create_then_at_once_a_delete_by_another_client(env: ControllerEnv) -> None:
    hook = AfterWrite(
        env.client,
        "POST",
        lambda name: delete(env, name),
    )
    hook.armed.set()
    want = [device(0)]
    ctrl = env.start(pools(p=rs.Pool(devices=want)), mutation_cache_ttl=LONG_TTL)
    assert hook.done.wait(SYNC_TIMEOUT)
    settled(env, ctrl, want)
    assert ctrl.stats().creates == 2


def test_delete_and_recreate_by_another_client_within_the_ttl(env: ControllerEnv) -> None:
    def replace(name: str) -> bytes:
        # Deleted and created again under the same name with other content (another copy
        # of the driver with a stale list, say), all before the controller reads its answer.
        delete(env, name)
        body = env.slice_body(name, "p", 1, 1, devices=[device(7)])
        env.create_slice(body)
        return DELETED

    hook = AfterWrite(env.client, "POST", replace)
    hook.armed.set()
    want = [device(0), device(1)]
    ctrl = env.start(pools(p=rs.Pool(devices=want)), mutation_cache_ttl=LONG_TTL)
    assert hook.done.wait(SYNC_TIMEOUT)
    settled(env, ctrl, want)
    # The other writer's object was taken over (updated), and that was reported.
    assert ctrl.stats().updates >= 1
    assert any(isinstance(exc, rs.ConflictingWriterError) for exc, _ in env.errors)


def test_update_then_at_once_a_label_by_another_client(env: ControllerEnv) -> None:
    """The controller reads the answer of its update after its watch delivered a later edit
    of only what it does not own (a label): that edit is still adopted as its own version,
    so the next update is one PUT, not reported as a conflicting writer."""

    def label(name: str) -> bytes:
        patch = {"metadata": {"labels": {"team": "other"}}}
        response = env.api.patch_resource_slice(name, patch, _preload_content=False)
        version = json.loads(response.data)["metadata"]["resourceVersion"]
        return f'"resourceVersion":"{version}"'.encode()

    hook = AfterWrite(env.client, "PUT", label)
    ctrl = env.start_synced(
        pools(p=rs.Pool(devices=[device(0), device(1)])), mutation_cache_ttl=LONG_TTL
    )
    hook.armed.set()
    labelled = [device(0), device(2)]
    ctrl.update(pools(p=rs.Pool(devices=labelled)))
    assert hook.done.wait(SYNC_TIMEOUT)
    settled(env, ctrl, labelled)
    env.counter.reset()

    want = [device(0), device(3)]
    ctrl.update(pools(p=rs.Pool(devices=want)))
    settled(env, ctrl, want)
    assert env.counter.writes() == {"PUT": 1}
    assert env.errors == []
    [after] = env.slices()
    assert after["metadata"]["labels"] == {"team": "other"}
