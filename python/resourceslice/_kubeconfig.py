"""Which cluster a client talks to when the driver does not say: kubectl's order.

``--kubeconfig`` (or the ``kubeconfig`` argument), then ``KUBECONFIG`` (``:``-separated
files, merged), then ``~/.kube/config``, then the in-cluster service account of a Pod.
Shared by the ``resourceslice`` command and :mod:`resourceslice.aio`; imports
``kubernetes`` only when a client is made (``resourceslice plan`` never needs it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resourceslice._http import ClosingApiClient


def kubeconfig_paths(flag: str | None) -> str | None:
    """kubectl's order: ``flag``, then ``KUBECONFIG`` (``:``-separated), then
    ``~/.kube/config`` if it exists; None means: use the in-cluster service account."""
    if flag:
        return flag
    env = os.environ.get("KUBECONFIG", "")
    if any(part for part in env.split(os.pathsep)):
        return env
    default = Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else None


def in_cluster() -> bool:
    """Whether this runs in a Pod, where the service account's config can be loaded."""
    return "KUBERNETES_SERVICE_HOST" in os.environ


def default_api_client(paths: str | None, context: str | None = None) -> ClosingApiClient:
    """A client of the kubeconfig ``paths``, or of the in-cluster config when None.

    Raises the client's ConfigException (or OSError) when it cannot be loaded.
    """
    import kubernetes.client
    import kubernetes.config
    from kubernetes.config.config_exception import ConfigException

    from resourceslice._http import ClosingApiClient, kubeconfig_client

    if paths is not None:
        return kubeconfig_client(paths, context)

    if not in_cluster():
        raise ConfigException(
            "no kubeconfig: set KUBECONFIG, create ~/.kube/config, or run in a Pod "
            "(in-cluster config)"
        )
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
        client_configuration=configuration
    )
    return ClosingApiClient(configuration)
