"""One replica of a central fabric driver, as a process of its own (as a Deployment's pod):
it publishes the fabric pool and attaches its devices under leader election.

Each ``attach`` call is appended to ``--calls`` (a JSON line, on disk before attach goes
on); with ``--hang`` the attach then never returns, as a fabric manager that never answers.
The replica prints ``leading`` when it takes the Lease. Used by
tests/e2e/test_binding_conditions.py, which SIGKILLs the leader mid-attach.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
from typing import Any

import resourceslice as rs
from resourceslice._kubeclient import kubeconfig_client


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--kubeconfig", "--driver", "--pool", "--identity", "--lease", "--calls"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--hang", action="store_true")
    args = parser.parse_args()

    def attach(claim: dict[str, Any], device: rs.BindingDevice) -> bool:
        call = {
            "identity": args.identity,
            "claim_uid": device.claim_uid,
            "device": device.device,
            "node": device.node,
            "allocated_at": device.allocated_at,
            "retry": device.retry,
        }
        with open(args.calls, "a") as calls:
            calls.write(json.dumps(call) + "\n")
            calls.flush()
            os.fsync(calls.fileno())
        if args.hang:
            threading.Event().wait()
        return True  # idempotent: attaching an attached port again changes nothing

    def leadership(exc: BaseException, message: str) -> None:
        print(f"error: {message}: {exc}", flush=True)

    devices: list[rs.Device] = [
        {"name": f"port-{i}", "bindsToNode": True, "bindingConditions": [f"{args.driver}/Attached"],
         "bindingFailureConditions": [f"{args.driver}/AttachFailed"]}
        for i in range(args.devices)
    ]  # fmt: skip
    selector: rs.NodeSelector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "fabric", "operator": "In", "values": ["a"]}]}]}  # fmt: skip
    election = rs.LeaderElection(
        "default", args.lease, identity=args.identity,
        lease_duration=3, renew_deadline=2, retry_period=0.4,
    )  # fmt: skip
    client = kubeconfig_client(args.kubeconfig)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    pool = rs.Pool(devices=devices, node_selector=selector)
    resources = rs.DriverResources(pools={args.pool: pool})
    with rs.start_controller(
        client, driver=args.driver, resources=resources, leader_election=election,
        error_handler=leadership,
    ) as ctrl, rs.start_binding_controller(ctrl, attach=attach) as binder:  # fmt: skip
        binder.wait_synced()
        print("started", flush=True)
        while not stopping.wait(0.05):
            if ctrl.is_leader():
                print("leading", flush=True)
                break
        stopping.wait()
    client.close()


if __name__ == "__main__":
    main()
