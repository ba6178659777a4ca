"""Issue 30: the node path (publisher + kubelet plugin) imports no ``kubernetes``.

The acceptance test of the lean node agent, written before the work: strict xfail until
``import resourceslice, resourceslice.kubeletplugin`` stops importing the ``kubernetes``
client (today ``_http`` and the controller's modules import it at module level). When it
passes, drop the marker; pytest's ``xfail_strict`` makes the pass fail the suite until then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.xfail(reason="issue 30: the node path still imports kubernetes", strict=True)
def test_node_path_imports_no_kubernetes() -> None:
    assert _kubernetes_modules_after_import() == []
