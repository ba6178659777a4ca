"""Issue 30: the node path (publisher + kubelet plugin) imports no ``kubernetes``.

The modules import it only for a caller that gives or asks for an ApiClient
(resourceslice._kubeclient); tests/integration/test_connection.py runs a driver on the
real apiserver with a Connection and checks that it never loads it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import resourceslice

_PROBE = """
import json, sys
import resourceslice, resourceslice.kubeletplugin
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes")))
"""


def _kubernetes_modules_after_import() -> list[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(resourceslice.__file__).parent.parent)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _PROBE],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    modules: list[str] = json.loads(done.stdout)
    return modules


def test_node_path_imports_no_kubernetes() -> None:
    assert _kubernetes_modules_after_import() == []
