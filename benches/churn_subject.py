"""The Python side of the health churn benchmark (benches/test_health_churn.py), the twin
of benches/godriver/churn: one pool of ``--devices`` devices published by resourceslice, then
a taint set or cleared on a random device ``--rate`` times a second for ``--seconds``, each
change one ``update_devices()`` call, the way a driver reports a device's health.

The same JSON lines as the Go side: events "published", "change", "churned" on stdout, and
a command on stdin answered with the writes and CPU seconds since the churn began.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import threading
import time
from typing import Any

import resourceslice as rs
from resourceslice._kubeclient import kubeconfig_client
from resourceslice.testing.counting import RequestCounter

TAINT = {"key": "link", "value": "down", "effect": "NoSchedule"}


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def device(i: int, tainted: bool) -> dict[str, Any]:
    return {
        "name": f"dev-{i}",
        "attributes": {"index": {"int": i}},
        "capacity": {"memory": {"value": "80Gi"}},
        **({"taints": [TAINT]} if tainted else {}),
    }


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--driver", required=True)
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--per-slice", type=int, default=64)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--update-interval", type=float, default=1.0)
    parser.add_argument("--write-concurrency", type=int, default=None)
    args = parser.parse_args()

    client = kubeconfig_client(args.kubeconfig)
    counter = RequestCounter(client)
    pool = rs.Pool(
        devices=[device(i, False) for i in range(args.devices)],
        all_nodes=True,
        max_devices_per_slice=args.per_slice,
    )
    concurrency: dict[str, Any] = {}
    if args.write_concurrency is not None:
        concurrency["max_concurrent_writes"] = args.write_concurrency
    ctrl = rs.start_controller(
        client,
        driver=args.driver,
        resources=rs.DriverResources(pools={"p": pool}),
        max_writes_per_second=None,  # as the Go side, whose client has no limit
        update_interval=args.update_interval,
        **concurrency,
    )
    assert ctrl.wait_synced(600)
    emit({"event": "published"})

    counter.reset()
    cpu = cpu_seconds()
    rng = random.Random(args.seed)
    tainted = [False] * args.devices
    clock = threading.Event()  # never set: its wait() paces the changes
    started = time.monotonic()
    changes = int(args.rate * args.seconds)
    for tick in range(changes):
        clock.wait(max(0.0, started + tick / args.rate - time.monotonic()))
        i = rng.randrange(args.devices)
        tainted[i] = not tainted[i]
        emit({"event": "change", "at": time.time(), "device": f"dev-{i}", "tainted": tainted[i]})
        ctrl.update_devices("p", upsert=[device(i, tainted[i])])
    emit({"event": "churned", "changes": changes, "seconds": time.monotonic() - started})

    for line in sys.stdin:
        command = json.loads(line)
        writes = counter.writes()
        counter.reset()
        emit({"id": command["id"], "writes": writes, "cpu_s": cpu_seconds() - cpu})
    ctrl.stop()


if __name__ == "__main__":
    main()
