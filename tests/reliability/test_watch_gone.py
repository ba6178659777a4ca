"""Watch history expired: 410 Gone after an etcd compaction, relist, no spurious writes.

The apiserver of this module runs without its watch cache, so a watch goes to etcd and a
compacted resourceVersion is answered 410 at once (the cache would hide the compaction).
The informer is held between two watches while the cluster changes and etcd is compacted,
as if its connection had been down for that long.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import resourceslice as rs
from integration.controller_env import device, pools
from resourceslice.informer import SliceInformer, _abort
from resourceslice.testing import TestCluster, start_cluster, wait_until

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
    """Holds every informer before its next watch while ``released`` is clear; counts lists."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.released = threading.Event()
        self.released.set()
        self.waiting = threading.Event()
        self.lists = 0
        watch, list_ = SliceInformer._watch, SliceInformer._list

        def held_watch(informer: SliceInformer, resource_version: str) -> bool:
            if not self.released.is_set():
                self.waiting.set()
                self.released.wait(60)
            return watch(informer, resource_version)

        def counted_list(informer: SliceInformer) -> str:
            self.lists += 1
            return list_(informer)

        monkeypatch.setattr(SliceInformer, "_watch", held_watch)
        monkeypatch.setattr(SliceInformer, "_list", counted_list)


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
    monkeypatch: pytest.MonkeyPatch,
    past_the_delete: bool,
    fault: str,
) -> None:
    held = HeldWatch(monkeypatch)
    run = Run(uncached_cluster, fault, f"gone-{str(past_the_delete).lower()}.example.com")
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
        _abort(wait_until(lambda: ctrl._informer._response))
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
