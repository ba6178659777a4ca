"""Which cluster a client talks to when the driver does not say: kubectl's order, and the
part of a kubeconfig that :class:`~resourceslice.connection.Connection` can use.

``--kubeconfig`` (or the ``kubeconfig`` argument), then ``KUBECONFIG`` (``:``-separated
files, merged), then ``~/.kube/config``, then the in-cluster service account of a Pod.
Shared by the ``resourceslice`` command, :mod:`resourceslice.aio` and
:func:`resourceslice.connect`; never imports ``kubernetes``.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

from resourceslice._configerror import ConfigError, UnsupportedConfig

#: A kubeconfig user's fields that only the ``kubernetes`` client handles.
_OTHER_AUTH = ("exec", "auth-provider", "username", "password", "as", "as-groups", "as-uid")
#: A kubeconfig cluster's fields that only the ``kubernetes`` client handles.
_OTHER_TRANSPORT = ("proxy-url", "tls-server-name")


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


def connection_options(paths: str, context: str | None) -> tuple[str, dict[str, Any]]:
    """The server and the :class:`Connection` keywords of ``context`` (default: the current
    one) in the kubeconfig files ``paths``.

    Merged as kubectl merges: the first file that names a context, cluster or user wins,
    and so does the first ``current-context``. A relative path is relative to the file
    that holds it. Raises ConfigError, or UnsupportedConfig for what needs the client.
    """
    contexts: dict[str, tuple[dict[str, Any], Path]] = {}
    clusters: dict[str, tuple[dict[str, Any], Path]] = {}
    users: dict[str, tuple[dict[str, Any], Path]] = {}
    current = ""
    for part in paths.split(os.pathsep):
        if not part:
            continue
        path = Path(part).expanduser()
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"kubeconfig {path}: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"kubeconfig {path}: not a mapping")
        current = current or str(loaded.get("current-context") or "")
        for key, into, field in (
            ("contexts", contexts, "context"),
            ("clusters", clusters, "cluster"),
            ("users", users, "user"),
        ):
            for entry in loaded.get(key) or ():
                if isinstance(entry, dict) and entry.get("name") not in into:
                    into[str(entry.get("name"))] = (entry.get(field) or {}, path.parent)
    name = context or current
    if not name:
        raise ConfigError(f"kubeconfig {paths}: no current-context, and none was asked for")
    if name not in contexts:
        raise ConfigError(f"kubeconfig {paths}: no context {name!r}")
    ctx = contexts[name][0]
    cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
    if cluster_name not in clusters:
        raise ConfigError(f"kubeconfig {paths}: context {name!r}: no cluster {cluster_name!r}")
    cluster, cluster_dir = clusters[cluster_name]
    user, user_dir = users.get(user_name, ({}, Path()))
    needs_client = [f"user.{k}" for k in _OTHER_AUTH if user.get(k)] + [
        f"cluster.{k}" for k in _OTHER_TRANSPORT if cluster.get(k)
    ]
    if needs_client:
        raise UnsupportedConfig(f"kubeconfig {paths}: {', '.join(needs_client)}")
    server = str(cluster.get("server") or "")
    if not server:
        raise ConfigError(f"kubeconfig {paths}: cluster {cluster_name!r} has no server")
    options: dict[str, Any] = {"insecure": bool(cluster.get("insecure-skip-tls-verify"))}
    if cluster.get("certificate-authority-data"):
        options["ca_data"] = _pem(cluster["certificate-authority-data"])
    elif cluster.get("certificate-authority"):
        options["ca_file"] = cluster_dir / str(cluster["certificate-authority"])
    for field, option in (("client-certificate", "cert"), ("client-key", "key")):
        if user.get(f"{field}-data"):
            options[f"{option}_data"] = _pem(user[f"{field}-data"])
        elif user.get(field):
            options[f"{option}_file"] = user_dir / str(user[field])
    if user.get("token"):
        options["token"] = str(user["token"])
    elif user.get("tokenFile"):
        options["token_file"] = user_dir / str(user["tokenFile"])
    return server, options


def _pem(data: str) -> str:
    """A kubeconfig ``*-data`` field's PEM (it holds it base64-encoded)."""
    return base64.b64decode(data).decode()
