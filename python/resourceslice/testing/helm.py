"""Helm's own code, for tests of a chart: ``helm lint`` and ``helm template``.

:func:`build_helm` builds Helm's command line (``helm.sh/helm/v4``, v4.3.2, pinned by the Go
module ``helmcli/``) once per machine, cached like the test apiserver
(``~/.cache/resourceslice/``; Go needed; ``RESOURCESLICE_HELM_BIN`` names a prebuilt one).
:func:`template` renders a chart into its manifests as dicts, which a test applies to the test
apiserver; :func:`lint` lints it::

    manifests = template("deploy/chart/resourceslice-driver", release="gpu", namespace="gpu",
                         values={"driver": "gpu.example.com",
                                 "image": {"repository": "registry.example.com/gpu", "tag": "1.0"}})

Neither talks to a cluster: ``helm template`` renders with Helm's default capabilities (the
Kubernetes version of the client-go it was built with).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from resourceslice.testing.cluster import ClusterError, build_go_binary

_PACKAGE_DIR = Path(__file__).resolve().parent

#: The Helm release the ``helmcli`` module pins.
HELM_VERSION = "v4.3.2"


class HelmError(RuntimeError):
    """Helm failed (exit code other than 0): the message is its command line and output."""

    def __init__(self, args: Sequence[str], returncode: int, output: str) -> None:
        super().__init__(f"helm {' '.join(args)} exited {returncode}:\n{output}")
        self.returncode = returncode
        self.output = output


def build_helm(*, quiet: bool = False) -> Path:
    """Helm's command line (``helmcli/``: Helm v4.3.2's ``main``), built once per machine."""
    prebuilt = os.environ.get("RESOURCESLICE_HELM_BIN")
    if prebuilt:
        if not os.access(prebuilt, os.X_OK):
            raise ClusterError(f"RESOURCESLICE_HELM_BIN={prebuilt} is not executable")
        return Path(prebuilt)
    return build_go_binary(
        _PACKAGE_DIR / "helmcli",
        binary="helm",
        cache_name="helm",
        what=f"helm {HELM_VERSION} (helm.sh/helm/v4)",
        quiet=quiet,
    )


def helm(*args: str, cwd: str | os.PathLike[str] | None = None) -> str:
    """Run ``helm ARGS`` and return its standard output; :class:`HelmError` (with stdout and
    stderr) when it fails. Helm's configuration, cache and data directories are a temporary one:
    no repository or plugin of the user's is seen, nothing of theirs is written."""
    binary = build_helm()
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env = {
            **os.environ,
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_DATA_HOME": f"{home}/data",
            "KUBECONFIG": f"{home}/no-kubeconfig",
        }
        done = subprocess.run(
            [str(binary), *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        raise HelmError(args, done.returncode, done.stdout + done.stderr)
    return done.stdout


def _values_args(values: Mapping[str, Any] | None, directory: str) -> list[str]:
    if not values:
        return []
    path = Path(directory, "values.json")
    path.write_text(json.dumps(values))  # JSON is YAML: helm reads it as a values file
    return ["--values", str(path)]


def template(
    chart: str | os.PathLike[str],
    *,
    release: str = "release",
    namespace: str = "default",
    values: Mapping[str, Any] | None = None,
    values_files: Sequence[str | os.PathLike[str]] = (),
) -> list[dict[str, Any]]:
    """``helm template RELEASE CHART --namespace NAMESPACE -f FILE... -f VALUES``: the
    manifests, in Helm's install order (Namespaces, then RBAC, ...), as dicts. ``values``
    come last: they win over ``values_files``."""
    with tempfile.TemporaryDirectory(prefix="helm-values-") as directory:
        files = [arg for path in values_files for arg in ("--values", str(path))]
        out = helm(
            "template",
            release,
            str(chart),
            "--namespace",
            namespace,
            *files,
            *_values_args(values, directory),
        )
    return [doc for doc in yaml.safe_load_all(out) if doc]


def lint(
    chart: str | os.PathLike[str],
    *,
    values: Mapping[str, Any] | None = None,
    values_files: Sequence[str | os.PathLike[str]] = (),
    strict: bool = True,
) -> str:
    """``helm lint CHART [--strict] -f FILE... -f VALUES``: its report; :class:`HelmError`
    when a chart fails (with ``strict``, a warning fails it too)."""
    with tempfile.TemporaryDirectory(prefix="helm-values-") as directory:
        files = [arg for path in values_files for arg in ("--values", str(path))]
        return helm(
            "lint",
            str(chart),
            *(["--strict"] if strict else []),
            *files,
            *_values_args(values, directory),
        )
