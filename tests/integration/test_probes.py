"""rs.serve_health: the probes of a driver process without the metrics extra, on the real
apiserver, in an interpreter where ``prometheus_client`` cannot be imported (as in an
installation without ``resourceslice[metrics]``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from support.controller_env import (
    SYNC_TIMEOUT,
    ControllerEnv,
)

pytestmark = pytest.mark.integration

DRIVER_PROCESS = textwrap.dedent(
    """
    import json, sys, urllib.error, urllib.request

    class WithoutPrometheus:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] == "prometheus_client":
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, WithoutPrometheus())

    import kubernetes
    import resourceslice as rs

    try:
        import resourceslice.metrics
    except ImportError:
        metrics_importable = False
    else:
        metrics_importable = True

    kubeconfig, driver, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    resources = rs.DriverResources(pools={"p": rs.Pool(devices=[{"name": "d0"}], all_nodes=True)})

    def get(path):
        try:
            with urllib.request.urlopen(base + path, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    with rs.serve_health("127.0.0.1", 0) as server:
        base = f"http://127.0.0.1:{server.address[1]}"
        before = get("/livez")
        with rs.start_controller(client, driver=driver, resources=resources) as ctrl:
            server.add(ctrl)
            assert ctrl.wait_synced(timeout)
            probes = {path: get(path) for path in ("/livez", "/readyz", "/healthz")}
        after = get("/livez")
        unknown = get("/metrics")
    client.close()
    print(json.dumps({
        "metrics_importable": metrics_importable,
        "prometheus_loaded": "prometheus_client" in sys.modules,
        "before": before, "probes": probes, "after": after, "unknown": unknown,
    }))
    """
)


def test_probes_without_prometheus(env: ControllerEnv) -> None:
    kubeconfig = str(env.cluster.kubeconfigs["admin"])
    result = subprocess.run(
        [sys.executable, "-c", DRIVER_PROCESS, kubeconfig, env.driver, str(SYNC_TIMEOUT)],
        capture_output=True,
        text=True,
        timeout=2 * SYNC_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    # The extra is what is missing: metrics do not import, and nothing else needs it.
    assert seen["metrics_importable"] is False
    assert seen["prometheus_loaded"] is False
    assert seen["before"] == [503, "{}\n"]  # no controller yet
    for path, (status, body) in seen["probes"].items():
        assert status == 200, (path, body)
        health = json.loads(body)[env.driver]
        assert health["alive"] and health["syncedOnce"] and health["failing"] == {}, health
    status, body = seen["after"]  # stopped: its threads ended
    assert status == 503 and json.loads(body)[env.driver]["alive"] is False
    assert seen["unknown"][0] == 404
    assert len(env.slices("p")) == 1
