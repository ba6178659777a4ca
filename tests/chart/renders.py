"""The renders of the chart (deploy/chart/resourceslice-driver) the tests apply and check,
made by Helm's own code (``resourceslice.testing.helm``, Helm v4.3.2).

- ``default``: the chart's defaults and the two values it requires (a driver name, an image):
  the kubelet plugin alone, as examples/kubelet_driver.py is deployed.
- ``publisher``: the central publisher alone (ci/publisher-values.yaml): two leader-elected
  replicas publishing a network-attached pool.
- ``sharded``: both halves of one driver (ci/sharded-values.yaml): the kubelet plugin, and a
  publisher whose four pools are split into four shards.

Every render also has ``namespace.create``: the Namespace, labelled for Pod Security, which
``kubectl apply`` of a render needs (``helm install --create-namespace`` makes its own).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resourceslice.testing.helm import template

CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart" / "resourceslice-driver"
# For the tests only: no kubelet runs the pods, so no image is pulled.
TEST_IMAGE = {"repository": "registry.example.com/tests/driver", "tag": "0.1.0"}


@dataclass(frozen=True)
class Render:
    release: str
    driver: str
    values_files: tuple[str, ...] = ()

    @property
    def namespace(self) -> str:
        return self.release

    def values(self) -> dict[str, Any]:
        return {"driver": self.driver, "image": TEST_IMAGE, "namespace": {"create": True}}


RENDERS = {
    "default": Render("demo-driver", "demo.example.com"),
    "publisher": Render("net-driver", "net.example.com", ("ci/publisher-values.yaml",)),
    "sharded": Render("fabric-driver", "demo.example.com", ("ci/sharded-values.yaml",)),
}


@functools.cache
def _rendered(name: str) -> tuple[dict[str, Any], ...]:
    render = RENDERS[name]
    return tuple(
        template(
            CHART,
            release=render.release,
            namespace=render.namespace,
            values=render.values(),
            values_files=[CHART / f for f in render.values_files],
        )
    )


def manifests(name: str) -> list[dict[str, Any]]:
    """The render's documents, in Helm's install order (the Namespace first)."""
    return copy.deepcopy(list(_rendered(name)))


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The one document of ``kind`` (and ``name``)."""
    [doc] = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    return doc


def roles_of(docs: list[dict[str, Any]], namespace: str, account: str) -> list[dict[str, Any]]:
    """Every Role and ClusterRole the render binds to the ServiceAccount."""
    bound = [
        (d["kind"][: -len("Binding")], d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and {"kind": "ServiceAccount", "name": account, "namespace": namespace} in d["subjects"]
    ]
    return [d for d in docs if (d["kind"], d["metadata"]["name"]) in bound]
