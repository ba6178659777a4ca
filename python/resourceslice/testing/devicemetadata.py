"""Go's own answers about DRA device metadata files (KEP-5304), to test a driver's files
against.

:func:`go_decode` reads a metadata file with Go's ``devicemetadata.DecodeMetadataFromStream``
(what a Go workload in the container uses), validation on. :func:`go_helper` has Go's
kubeletplugin helper (``EnableDeviceMetadata``) prepare a claim, update a request's file or
unprepare the claim, in directories of the test's, with the devices the test gives: the files
Go's helper writes for the same claim, to compare with
:mod:`resourceslice.kubeletplugin.metadata`'s. Both are ``metadataoracle/``, a Go program
pinned to k8s.io/dynamic-resource-allocation v0.37.2, built once per machine like the test
apiserver (Go needed; ``RESOURCESLICE_METADATAORACLE_BIN`` names a prebuilt one)::

    answer = go_decode(host_path)              # {"decodedFrom", "validationError", "object"}
    assert answer["object"]["requests"][0]["devices"][0]["attributes"] == {...}
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from resourceslice.kubeletplugin.types import PreparedDevice
from resourceslice.testing.cluster import ClusterError, ask_go_program, build_go_binary

_PACKAGE_DIR = Path(__file__).resolve().parent


def build_metadata_oracle(*, quiet: bool = False) -> Path:
    """The Go oracle's binary (``metadataoracle/``), built once per machine (cached as the
    test apiserver)."""
    prebuilt = os.environ.get("RESOURCESLICE_METADATAORACLE_BIN")
    if prebuilt:
        if not os.access(prebuilt, os.X_OK):
            raise ClusterError(f"RESOURCESLICE_METADATAORACLE_BIN={prebuilt} is not executable")
        return Path(prebuilt)
    return build_go_binary(
        _PACKAGE_DIR / "metadataoracle",
        binary="metadataoracle",
        cache_name="metadataoracle",
        what="the device metadata oracle (Go's k8s.io/dynamic-resource-allocation devicemetadata "
        "and kubeletplugin)",
        quiet=quiet,
    )


def _ask(request: Mapping[str, Any]) -> dict[str, Any]:
    return ask_go_program(build_metadata_oracle(), request)


def go_decode(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What Go's decoder reads from the metadata file at ``path``: ``{"decodedFrom":
    "<group/version of the object used>", "validationError": "<Go's validation of it, empty
    when valid>", "object": <it, as metadata.resource.k8s.io/v1beta1 JSON>}``, or ``{"error":
    "..."}`` when it cannot read it."""
    return _ask({"op": "decode", "path": os.fspath(path)})


def _device(device: PreparedDevice) -> dict[str, Any]:
    metadata = None
    if device.metadata is not None:
        metadata = {
            "attributes": dict(device.metadata.attributes) or None,
            "networkData": device.metadata.network_data,
        }
    return {
        "requests": list(device.requests),
        "poolName": device.pool_name,
        "deviceName": device.device_name,
        "cdiDeviceIDs": list(device.cdi_device_ids),
        "metadata": metadata,
    }


def go_helper(
    op: str,
    *,
    driver: str,
    plugin_data_dir: str | os.PathLike[str],
    cdi_dir: str | os.PathLike[str],
    versions: Sequence[str],
    claim: Mapping[str, Any] | None = None,
    devices: Sequence[PreparedDevice] = (),
    request: str = "",
) -> dict[str, Any]:
    """Go's kubeletplugin helper with ``EnableDeviceMetadata(true, versions)`` and
    ``CDIDirectory(cdi_dir)``, its plugin data directory ``plugin_data_dir``:

    - ``"prepare"``: kubelet's ``NodePrepareResources`` (v1) of ``claim`` (a v1
      ResourceClaim, which the helper reads from a fake clientset), the driver answering with
      ``devices`` → ``{"devices": [{"requestNames", "poolName", "deviceName",
      "cdiDeviceIds"}]}``, Go's answer to kubelet;
    - ``"update"``: ``Helper.UpdateRequestMetadata`` of ``request`` of ``claim`` with
      ``devices`` → ``{}``;
    - ``"unprepare"``: ``NodeUnprepareResources`` of ``claim``, the driver succeeding → ``{}``.

    Each answers ``{"error": "..."}`` when Go's helper failed.
    """
    body: dict[str, Any] = {
        "op": op,
        "driver": driver,
        "pluginDataDir": os.fspath(plugin_data_dir),
        "cdiDir": os.fspath(cdi_dir),
        "versions": list(versions),
        "devices": [_device(d) for d in devices],
    }
    if claim is not None:
        body["claim"] = claim
    if op == "update":
        if claim is None:
            raise ValueError("update needs the claim")
        meta = claim["metadata"]
        body.update(
            namespace=meta["namespace"], name=meta["name"], uid=meta["uid"], request=request
        )
        del body["claim"]
    return _ask(body)


__all__ = ["build_metadata_oracle", "go_decode", "go_helper"]
