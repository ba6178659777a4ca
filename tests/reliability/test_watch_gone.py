"""Watch history expired: 410 Gone after an etcd compaction, relist, no spurious writes.

The apiserver of this module runs without its watch cache, so a watch goes to etcd and a
compacted resourceVersion is answered 410 at once (the cache would hide the compaction).
The informer is held between two watches while the cluster changes and etcd is compacted,
as if its connection had been down for that long.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice._http import pool_manager
from resourceslice.testing import TestCluster, start_cluster, wait_until
from support.controller_env import device, pools

from .faults import Run

pytestmark = [pytest.mark.integration, pytest.mark.fault]


@pytest.fixture(scope="module")
def uncached_cluster() -> Iterator[TestCluster]:
    cluster = start_cluster(extra_args=("--watch-cache=false",))
    try:
        yield cluster
    finally:
        cluster.close()


def etcd(cluster: TestCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        cluster.etcd_url + path, data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


def compact(cluster: TestCluster) -> int:
    """Compact etcd at its current revision: every older resourceVersion is gone."""
    revision = int(etcd(cluster, "/v3/kv/range", {"key": "Lw==", "limit": 1})["header"]["revision"])
    etcd(cluster, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


class HeldWatch:
    """Holds a client's watches while ``released`` is clear, and counts its lists.

    It wraps the client's urllib3 pool manager, which every request of the informer passes
    through: the informer is held before its next watch as if its connection were down.
    """

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.released = threading.Event()
        self.released.set()
        self.waiting = threading.Event()
        self.lists = 0
        self._watch: Any = None
        pool = pool_manager(client)
        send = pool.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            watch = "watch=true" in url.lower()
            if method == "GET" and "/resourceslices" in url and not watch:
                self.lists += 1
            if watch and not self.released.is_set():
                self.waiting.set()
                self.released.wait(60)
            response = send(method, url, *args, **kwargs)
            if watch:
                self._watch = response
            return response

        pool.request = request

    def drop_watch(self) -> None:
        """End the open watch as a dropped connection would."""
        response = wait_until(lambda: self._watch)
        # The informer may have closed it a moment ago (EBADF from the socket, seen once on
        # Python 3.9 under load): then it is dropped already.
        with contextlib.suppress(OSError):
            response.shutdown()
        response.close()


@pytest.mark.parametrize(
    ("past_the_delete", "fault"),
    [
        # History compacted beyond where the watch resumes: 410 Gone.
        (True, "3a 410 Gone (etcd compacted), relist"),
        # Compacted exactly at the missed delete: the server fails the event (500, its
        # previous version is gone), which only a relist gets past too.
        (False, "3b compacted at the missed event (500), relist"),
    ],
)
def test_expired_history_relists_without_spurious_writes(
    uncached_cluster: TestCluster,
    past_the_delete: bool,
    fault: str,
) -> None:
    run = Run(uncached_cluster, fault, f"gone-{str(past_the_delete).lower()}.example.com")
    held = HeldWatch(run.env.client)
    try:
        wanted = {"a": [device(i) for i in range(300)], "b": [device(1000)]}
        ctrl = run.env.start_synced(
            pools(a=rs.Pool(devices=wanted["a"]), b=rs.Pool(devices=wanted["b"])),
            sync_delay=0.5,
            mutation_cache_ttl=2.0,
        )
        assert held.lists == 1
        untouched = {
            s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in run.env.slices("a")
        }
        run.env.counter.reset()

        held.released.clear()
        held.drop_watch()
        assert held.waiting.wait(30)
        # Missed by the informer: a slice deleted, then the history it would resume from gone.
        [lost] = run.env.slices("b")
        run.env.api.delete_resource_slice(lost["metadata"]["name"], _preload_content=False)
        if past_the_delete:
            # Any later write moves the revision on; this one is not even ours.
            body = run.env.slice_body("unrelated-", "x", 1, 1)
            body["spec"]["driver"] = "unrelated.example.com"
            other = run.env.create_slice(body)
            run.env.api.delete_resource_slice(other["metadata"]["name"], _preload_content=False)
        compact(uncached_cluster)
        since = time.monotonic()
        held.released.set()

        outcome = run.finish(ctrl, wanted, since)
        assert held.lists == 2  # the resumed watch was refused, a relist followed
        assert outcome.writes == {"POST": 1}  # pool b put back, nothing else
        assert {
            s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in run.env.slices("a")
        } == untouched
        # What the informer met on the way is reported; nothing about syncing pools.
        assert all("ResourceSlices" in m and "pool" not in m for _, m in run.env.errors)
    finally:
        held.released.set()
        run.close()
