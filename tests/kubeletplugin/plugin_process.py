"""A kubelet plugin in a process of its own, for tests that kill it:
``python -m tests.kubeletplugin.plugin_process <kubeconfig> <driver> <node dir>``.

Prepares every allocated device of a claim as itself; says ``ready`` on stdout once kubelet
can find it, and runs until killed or its stdin closes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.kubelet_env import RecordingPlugin

from resourceslice import kubeletplugin
from resourceslice._kubeclient import kubeconfig_client


def main() -> None:
    kubeconfig, driver, node_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    with kubeletplugin.start(
        RecordingPlugin(driver),
        driver=driver,
        api_client=kubeconfig_client(kubeconfig),
        registrar_dir=str(node_dir / "registry"),
        plugin_data_dir=str(node_dir / "plugins" / driver),
    ):
        print("ready", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
