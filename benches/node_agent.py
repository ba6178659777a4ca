"""The example driver (examples/kubelet_driver.py) as a node agent process of its own, for
benches/test_node_agent.py, the twin of benches/godriver run for one node.

It starts the example's kubelet plugin for ``--node`` with ``--devices`` devices, from a
kubeconfig (the example itself reads the in-cluster service account, which a simulated node
has not), prints ``{"event": "ready"}`` once started, and stops when stdin closes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import kubelet_driver
import resourceslice as rs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--registry", required=True)
    parser.add_argument("--plugin-data", required=True)
    parser.add_argument("--cdi", required=True)
    parser.add_argument("--devices", type=int, required=True)
    args = parser.parse_args()
    client = rs.connect(args.kubeconfig)
    helper = kubelet_driver.run(
        client,
        args.node,
        cdi_dir=args.cdi,
        devices=args.devices,
        registrar_dir=args.registry,
        plugin_data_dir=args.plugin_data,
    )
    sys.stdout.write(json.dumps({"event": "ready"}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the bench closes it
    helper.stop()
    client.close()


if __name__ == "__main__":
    main()
