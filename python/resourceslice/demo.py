"""``make demo``: a real local apiserver, two drivers' pools published, one device changed.

Run with ``python -m resourceslice.demo``. It builds the test apiserver if needed (once per
machine), publishes a GPU node's devices and a network-attached pool of several thousand
devices, prints what is in the cluster, changes one device, shows that it took one update,
and stops everything it started.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import kubernetes.client

import resourceslice as rs
from resourceslice.testing import start_cluster

NODE = "demo-node-1"
GPU_DRIVER = "gpu.example.com"
NET_DRIVER = "fabric.example.com"


def gpu_devices(node: str, count: int) -> list[dict[str, Any]]:
    """A node's GPUs, each also offered as MIG-style slices: many devices for one node."""
    return [
        {
            "name": f"gpu-{i // 8}-part-{i % 8}",
            "attributes": {
                "index": {"int": i // 8},
                "partition": {"int": i % 8},
                "model": {"string": "Example A100"},
                "uuid": {"string": f"GPU-{node}-{i // 8:04d}"},
                "driverVersion": {"version": "550.54.15"},
                "numa": {"int": (i // 8) % 2},
            },
            "capacity": {"memory": {"value": "5Gi"}, "sm": {"value": "14"}},
        }
        for i in range(count)
    ]


def fabric_devices(count: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"port-{i:05d}",
            "attributes": {
                "switch": {"string": f"leaf-{i // 48:03d}"},
                "port": {"int": i % 48},
                "speed": {"string": "400G"},
            },
            "capacity": {"bandwidth": {"value": "400G"}},
        }
        for i in range(count)
    ]


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def show_slices(api: kubernetes.client.ResourceV1Api) -> None:
    listing = json.loads(api.list_resource_slice(_preload_content=False).data)
    rows = [("NAME", "DRIVER", "POOL", "GEN", "COUNT", "DEVICES", "NODE")]
    for item in sorted(listing["items"], key=lambda o: o["metadata"]["name"]):
        spec = item["spec"]
        pool = spec["pool"]
        where = spec.get("nodeName") or ("all nodes" if spec.get("allNodes") else "selector")
        rows.append(
            (
                item["metadata"]["name"],
                spec["driver"],
                pool["name"],
                str(pool["generation"]),
                str(pool["resourceSliceCount"]),
                str(len(spec.get("devices", []))),
                where,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    print(f"  {len(rows) - 1} slices")


def main() -> int:
    say("starting a local kube-apiserver + etcd (resourceslice.testing)")
    with start_cluster() as cluster:
        print(f"  server {cluster.server}, core backend: {rs.core_backend()}")
        client = cluster.api_client()
        core_api = kubernetes.client.CoreV1Api(client)
        api = kubernetes.client.ResourceV1Api(client)
        core_api.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})

        gpus = gpu_devices(NODE, 256)
        say(f"publishing {len(gpus)} devices of {GPU_DRIVER} on node {NODE}")
        node_ctrl = rs.start_controller(
            client,
            driver=GPU_DRIVER,
            owner=rs.Owner(api_version="v1", kind="Node", name=NODE),
            resources=rs.DriverResources(pools={NODE: rs.Pool(devices=gpus)}),
        )
        ports = fabric_devices(5000)
        say(f"publishing a network-attached pool of {len(ports)} devices of {NET_DRIVER}")
        selector = {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "fabric", "operator": "In", "values": ["a"]}]}
            ]
        }
        fabric_ctrl = rs.start_controller(
            client,
            driver=NET_DRIVER,
            resources=rs.DriverResources(
                pools={"fabric-a": rs.Pool(devices=ports, node_selector=selector)}
            ),
        )
        with node_ctrl, fabric_ctrl:
            if not (node_ctrl.wait_synced(120) and fabric_ctrl.wait_synced(120)):
                print("  the pools did not sync in time", file=sys.stderr)
                return 1
            print(f"  {GPU_DRIVER}: {node_ctrl.stats()}")
            print(f"  {NET_DRIVER}: {fabric_ctrl.stats()}")
            say("what the cluster now holds")
            show_slices(api)

            say("changing one device (port-01234 drops to 200G)")
            before = fabric_ctrl.stats()
            ports[1234]["attributes"]["speed"] = {"string": "200G"}
            ports[1234]["capacity"]["bandwidth"] = {"value": "200G"}
            fabric_ctrl.update(
                rs.DriverResources(
                    pools={"fabric-a": rs.Pool(devices=ports, node_selector=selector)}
                )
            )
            if not fabric_ctrl.wait_synced(60):
                print("  the change did not sync in time", file=sys.stderr)
                return 1
            after = fabric_ctrl.stats()
            print(
                f"  writes for that change: {after.creates - before.creates} creates, "
                f"{after.updates - before.updates} updates, "
                f"{after.deletes - before.deletes} deletes"
            )
        say("stopping the controllers (slices stay) and the apiserver")
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
