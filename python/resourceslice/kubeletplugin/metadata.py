"""Device metadata in containers (KEP-5304): a file per request of each prepared claim, which
the container runtime bind-mounts read-only into the containers using the claim, telling them
which devices they got, with their attributes and network data.

``kubeletplugin.start(..., device_metadata=[kubeletplugin.METADATA_V1BETA1])`` turns it on,
as ``EnableDeviceMetadata`` does Go's helper (``k8s.io/dynamic-resource-allocation/
kubeletplugin``, ``metadata.go``, v0.37.2), whose files these are byte for byte:

- **The file** of a request: ``<plugin_data_dir>/dra-device-metadata/<namespace>_<claim>/
  <request>/metadata.json`` on the host, mounted at
  ``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/
  <driver>-metadata.json`` — or, for a claim made from a template, under
  ``resourceclaimtemplates/<pod claim name>/`` (the name in ``pod.spec.resourceClaims``,
  from the claim's ``resource.kubernetes.io/pod-claim-name`` annotation), since the claim's
  own name is generated. A subrequest's devices (``req/sub``) go into their request's file.
- **Its content**: a stream of the same ``DeviceMetadata`` object once per version asked for,
  in that order (newest first: a reader takes the first version it knows, as Go's
  ``devicemetadata.DecodeMetadataFromStream`` does), each as Go's pretty JSON encoder writes
  it, followed by a newline: ``metadata`` (the claim's name, namespace, UID and a
  ``generation``, 1 at prepare, one more per update), ``podClaimName``, and ``requests``
  with the one request, named as allocated (``req/sub``), and its devices (``driver``,
  ``pool``, ``name``, ``attributes``, ``networkData``).
- **A CDI spec per request**, ``<cdi_dir>/<driver>_metadata_<claim uid>_<request>.json``, of
  kind ``<driver>/metadata``, whose device ``<claim uid>_<request>`` mounts the file
  (``ro``, ``bind``); its ID is added to the CDI device IDs of the request's first device in
  the answer to kubelet, so every container using the request gets the mount.
- **When**: written after the driver's prepare for each claim it prepared, removed (the
  claim's directory and specs) after the driver's unprepare succeeded for it;
  ``Helper.update_request_metadata`` rewrites a request's file with data known only later
  (the network's, once the pod's sandbox exists). Each file is replaced atomically (a
  temporary file, synced, renamed, the directory synced), mode 0644, directories 0755.

Where this differs from Go's helper, and why:

- A claim whose metadata cannot be written (a full disk, or metadata that is not valid)
  fails, with the reason, and kubelet retries; Go's logs the error and answers without the
  mount, so the pod runs without its file. The metadata is checked as the API checks the
  same fields: attributes as a ResourceSlice's, network data as a claim's status (Go's types
  cannot hold what its decoder would refuse; a dict can).
- With the checkpoint (the default), a repeated prepare answered from it leaves the files as
  they are, updates included; Go's prepares again and rewrites them at generation 1, losing
  what updates wrote (the driver's new answer lacks the data of a sandbox that exists
  already). The metadata specs are recorded with the claim, so a CDI directory that a reboot
  emptied gets them back, as the driver's own.
- An update checks that the file is of the claim UID it names (a claim of the same name may
  have replaced it), and updates of one helper are serialised; Go's does neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from resourceslice._claimstatus_checks import _check_network
from resourceslice._errortext import describe_error
from resourceslice._names import is_dns_label, is_dns_subdomain
from resourceslice.api import DriverResources, Pool
from resourceslice.kubeletplugin.cdi import remove_claim_spec, write_claim_spec
from resourceslice.kubeletplugin.claims import ResourceClaim
from resourceslice.kubeletplugin.service import error_text
from resourceslice.kubeletplugin.types import (
    ClaimRef,
    DeviceMetadata,
    Plugin,
    PreparedDevice,
    PrepareResult,
    PrepareResults,
    UnprepareResults,
)
from resourceslice.preview import validate

#: The API group of the metadata's versions.
GROUP = "metadata.resource.k8s.io"
#: The newest version (v0.37.2), which must be among those written.
METADATA_V1BETA1 = f"{GROUP}/v1beta1"
#: The older version, for readers not updated yet (written after v1beta1, if asked for).
METADATA_V1ALPHA1 = f"{GROUP}/v1alpha1"
_KNOWN_VERSIONS = (METADATA_V1BETA1, METADATA_V1ALPHA1)

#: Where the files are inside containers (Go's ``metadata.ContainerDir``).
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
#: The annotation naming a claim made from a template in its pod's ``resourceClaims``.
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
#: The directory of the files in the plugin data directory (Go's ``metadataSubDir``).
METADATA_SUBDIR = "dra-device-metadata"

_FILE_NAME = "metadata.json"
_FILE_MODE = 0o644
_DIR_MODE = 0o755
# What encoding/json escapes in strings that Python's json does not (for HTML); they appear
# in no JSON text outside strings, so the whole text can be translated.
_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)
# Go's field order of a DeviceAttribute and a NetworkDeviceData.
_ATTRIBUTE_FIELDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
_NETWORK_FIELDS = ("interfaceName", "ips", "hardwareAddress")


def container_path(
    driver: str, request: str, *, claim_name: str | None = None, pod_claim_name: str | None = None
) -> str:
    """Where a request's metadata file of ``driver`` is in a container: under the claim's
    name, or for a claim made from a template under ``pod_claim_name`` (its name in
    ``pod.spec.resourceClaims``). Go's ``metadata.ResourceClaimFilePath`` and
    ``ResourceClaimTemplateFilePath``."""
    if pod_claim_name:
        where = f"resourceclaimtemplates/{pod_claim_name}"
    elif claim_name:
        where = f"resourceclaims/{claim_name}"
    else:
        raise ValueError("give claim_name or pod_claim_name")
    return f"{CONTAINER_DIR}/{where}/{request}/{driver}-metadata.json"


def check_versions(versions: Sequence[str]) -> tuple[str, ...]:
    """The versions to write, in order; ValueError as Go's ``Start`` refuses them: none, one
    it does not know, or without the newest (which a driver names itself, so that an upgrade
    of this library never drops a version its readers know)."""
    if isinstance(versions, str):
        raise ValueError("device_metadata: a list of versions, not a string")
    versions = list(versions)
    if not versions:
        raise ValueError("metadata versions must be explicitly selected, none chosen")
    for version in versions:
        if version not in _KNOWN_VERSIONS:
            raise ValueError(f"metadata version {version!r} is not supported")
    if len(set(versions)) != len(versions):
        raise ValueError(f"metadata versions {versions} name one twice")
    if METADATA_V1BETA1 not in versions:
        raise ValueError(
            f"the latest metadata version is {METADATA_V1BETA1} and must be enabled explicitly"
        )
    return tuple(versions)


def base_request(request: str) -> str:
    """A subrequest reference (``req/sub``) as its request, which names the file."""
    return request.split("/", 1)[0]


def metadata_problems(metadata: DeviceMetadata) -> list[str]:
    """What a reader validating the file would refuse in ``metadata``, each as ``<path>:
    <problem>``: attributes as a ResourceSlice's device has them checked, network data as a
    claim's ``status.devices[].networkData``. Empty when it is valid."""
    problems: list[str] = []
    attributes = metadata.attributes
    if not isinstance(attributes, Mapping):
        return ["attributes: must be a mapping"]
    for name, value in attributes.items():
        unknown = (
            sorted(str(k) for k in value if k not in _ATTRIBUTE_FIELDS)
            if isinstance(value, Mapping)
            else []
        )
        if unknown:
            problems.append(f"attributes[{name!r}]: unknown fields {unknown}")
    if attributes:
        # The slice's own rules (names, one value of the right type, lengths, semantic
        # versions, at most 32): the core's validation of a device made of them alone.
        device = {"name": "d", "attributes": dict(attributes)}
        pool = Pool(devices=[device], all_nodes=True)  # type: ignore[list-item]
        prefix = 'pools["p"].devices[0]'
        for problem in validate(DriverResources(pools={"p": pool}), driver="x.example.com"):
            if problem.startswith(f"{prefix}: "):
                problem = "attributes: " + problem[len(prefix) + 2 :]
            problems.append(problem.replace(f"{prefix}.attributes", "attributes", 1))
    if metadata.network_data is not None:
        _check_network(problems, "networkData", metadata.network_data)
    return problems


def _attribute_json(value: Mapping[str, Any]) -> dict[str, Any]:
    return {k: value[k] for k in _ATTRIBUTE_FIELDS if value.get(k) is not None and value[k] != []}


def _network_json(value: Mapping[str, Any]) -> dict[str, Any]:
    # encoding/json's omitempty: an empty string or list is left out (an empty object is not).
    return {k: value[k] for k in _NETWORK_FIELDS if value.get(k)}


def device_json(driver: str, device: PreparedDevice) -> dict[str, Any]:
    """A device of a metadata file, fields in Go's order."""
    out: dict[str, Any] = {"driver": driver, "pool": device.pool_name, "name": device.device_name}
    metadata = device.metadata
    if metadata is not None:
        problems = metadata_problems(metadata)
        if problems:
            raise ValueError(
                f"the metadata of device {device.pool_name}/{device.device_name}: "
                + "; ".join(problems)
            )
        if metadata.attributes:
            out["attributes"] = {
                name: _attribute_json(metadata.attributes[name])
                for name in sorted(metadata.attributes)
            }
        if metadata.network_data is not None:
            out["networkData"] = _network_json(metadata.network_data)
    return out


def encode_stream(obj: Mapping[str, Any], versions: Sequence[str]) -> bytes:
    """``obj`` (a DeviceMetadata without ``kind`` and ``apiVersion``) once per version, as
    Go's helper writes it: each as ``json.MarshalIndent`` (two spaces, HTML characters
    escaped), then a newline."""
    parts = []
    for version in versions:
        versioned = {"kind": "DeviceMetadata", "apiVersion": version, **obj}
        parts.append(json.dumps(versioned, indent=2, ensure_ascii=False).translate(_GO_ESCAPES))
    return "".join(part + "\n" for part in parts).encode()


def decode_first(data: bytes) -> dict[str, Any]:
    """The first object of a metadata stream in a version this library knows (others are
    skipped, as Go's decoder skips versions newer than it); ValueError when there is none or
    the stream is not JSON."""
    text = data.decode()
    decoder = json.JSONDecoder()
    position = 0
    unknown = []
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            break
        obj, position = decoder.raw_decode(text, position)
        version = obj.get("apiVersion") if isinstance(obj, dict) else None
        if version in _KNOWN_VERSIONS and obj.get("kind") == "DeviceMetadata":
            return cast(dict[str, Any], obj)
        unknown.append(str(version))
    if not unknown:
        raise ValueError("no metadata objects found in stream")
    raise ValueError(f"no compatible metadata version found in stream (versions: {unknown})")


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a temporary file, synced, renamed, the directory
    synced (a reader never sees half a file, a crash leaves the old one or the new one)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), _FILE_MODE)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _check_names(namespace: str, name: str, request: str) -> None:
    # They name directories: nothing that leaves the plugin's (what the API allows anyway).
    if not is_dns_label(namespace):
        raise ValueError(f"namespace {namespace!r} is not a DNS label")
    if not is_dns_subdomain(name):
        raise ValueError(f"claim name {name!r} is not a DNS subdomain")
    if not is_dns_label(request):
        raise ValueError(f"request name {request!r} is not a DNS label")


class MetadataWriter:
    """Writes and removes the metadata files of a driver's claims, and their CDI specs
    (``helper.device_metadata`` when the feature is on). See the module doc."""

    def __init__(
        self,
        driver: str,
        *,
        plugin_data_dir: str | os.PathLike[str],
        cdi_dir: str | os.PathLike[str],
        versions: Sequence[str],
    ) -> None:
        self.driver = driver
        self.versions = check_versions(versions)
        # Absolute: the runtime mounts the host path the spec names.
        self.directory = Path(os.path.abspath(plugin_data_dir)) / METADATA_SUBDIR
        self.cdi_dir = Path(os.path.abspath(cdi_dir))
        self._lock = threading.Lock()

    # -- paths ---------------------------------------------------------------------------

    def claim_dir(self, namespace: str, name: str) -> Path:
        return self.directory / f"{namespace}_{name}"

    def file_path(self, namespace: str, name: str, request: str) -> Path:
        """The host path of the file of ``request`` (its base request) of the claim."""
        return self.claim_dir(namespace, name) / base_request(request) / _FILE_NAME

    def spec_path(self, claim_uid: str, request: str) -> Path:
        return self.cdi_dir / f"{self.driver}_metadata_{claim_uid}_{base_request(request)}.json"

    def cdi_device_id(self, claim_uid: str, request: str) -> str:
        return f"{self.driver}/metadata={claim_uid}_{base_request(request)}"

    # -- prepare, update, unprepare ------------------------------------------------------

    def _object(
        self,
        meta: Mapping[str, Any],
        generation: int,
        pod_claim_name: str | None,
        request: str,
        devices: Sequence[PreparedDevice],
    ) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "generation": generation,
            }
        }
        if pod_claim_name is not None:
            obj["podClaimName"] = pod_claim_name
        obj["requests"] = [
            {"name": request, "devices": [device_json(self.driver, d) for d in devices]}
        ]
        return obj

    def write_claim(
        self, claim: ResourceClaim, devices: Sequence[PreparedDevice]
    ) -> dict[str, str]:
        """The files and specs of a claim the driver prepared ``devices`` of, one per request
        the devices name (a device naming none is in none, as in Go); the metadata CDI
        device ID of each base request. Raises what failed (ValueError: the metadata is not
        valid)."""
        meta = claim["metadata"]
        pod_claim_name = (meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
        by_request: dict[str, list[PreparedDevice]] = {}
        for device in devices:
            for request in device.requests:
                by_request.setdefault(request, []).append(device)
        bases: dict[str, str] = {}
        for request in by_request:
            other = bases.setdefault(base_request(request), request)
            if other != request:
                raise ValueError(f"devices of one request are reported as {other} and {request}")
        encoded = {}
        for request, request_devices in by_request.items():
            _check_names(meta["namespace"], meta["name"], base_request(request))
            obj = self._object(meta, 1, pod_claim_name, request, request_devices)
            encoded[request] = encode_stream(obj, self.versions)
        ids = {}
        with self._lock:
            for request, data in encoded.items():
                base = base_request(request)
                path = self.file_path(meta["namespace"], meta["name"], base)
                path.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
                _write_atomically(path, data)
                write_claim_spec(
                    meta["uid"],
                    self.spec_path(meta["uid"], base),
                    self._spec(meta["uid"], base, path, meta["name"], pod_claim_name),
                )
                ids[base] = self.cdi_device_id(meta["uid"], base)
        return ids

    def _spec(
        self, uid: str, request: str, path: Path, claim_name: str, pod_claim_name: str | None
    ) -> dict[str, Any]:
        name = f"{uid}_{request}"
        mount = {
            "hostPath": str(path),
            "containerPath": container_path(
                self.driver, request, claim_name=claim_name, pod_claim_name=pod_claim_name
            ),
            "options": ["ro", "bind"],
        }
        return {
            # The oldest version that has what the spec uses, as Go's helper chooses
            # (cdispec.MinimumRequiredVersion): 0.5.0 allows a device name starting with a
            # digit, as a claim UID may.
            "cdiVersion": "0.5.0" if name[0] in "0123456789" else "0.3.0",
            "kind": f"{self.driver}/metadata",
            "devices": [{"name": name, "containerEdits": {"mounts": [mount]}}],
            "containerEdits": {},
        }

    def update(
        self, namespace: str, name: str, uid: str, request: str, devices: Sequence[PreparedDevice]
    ) -> None:
        """Rewrite the file of ``request`` of a prepared claim with ``devices`` (their
        metadata now complete), one generation further. ValueError when the claim's request
        has no file (not prepared here, or unprepared), the file is of another claim UID, or
        the metadata is not valid."""
        base = base_request(request)
        _check_names(namespace, name, base)
        path = self.file_path(namespace, name, base)
        with self._lock:
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise ValueError(
                    f"request {json.dumps(request)} not found in prepared claim {namespace}/{name}"
                ) from None
            try:
                previous = decode_first(data)
            except ValueError as exc:
                raise ValueError(f"decode existing metadata {path}: {exc}") from None
            meta = previous.get("metadata") or {}
            if meta.get("uid") != uid:
                raise ValueError(
                    f"the metadata of claim {namespace}/{name} is of its UID {meta.get('uid')}, "
                    f"not {uid}"
                )
            obj = self._object(
                {"name": name, "namespace": namespace, "uid": uid},
                int(meta.get("generation") or 0) + 1,
                previous.get("podClaimName"),
                request,
                devices,
            )
            _write_atomically(path, encode_stream(obj, self.versions))

    def remove_claim(self, namespace: str, name: str, uid: str) -> None:
        """Remove the claim's files and specs (nothing to do when there are none)."""
        with self._lock:
            claim_dir = self.claim_dir(namespace, name)
            if claim_dir.parent != self.directory:
                raise ValueError(f"claim {namespace}/{name} cannot name a directory")
            _remove_tree(claim_dir)
            prefix = f"{self.driver}_metadata_{uid}_"
            try:
                entries = list(os.scandir(self.cdi_dir))
            except FileNotFoundError:
                return
            for entry in entries:
                if entry.name.startswith(prefix) and entry.name.endswith(".json"):
                    remove_claim_spec(uid, Path(entry.path))


def _remove_tree(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)


def _text(exc: Exception) -> str:
    # What these raise says what failed in its own words (an invalid attribute, a path).
    return str(exc) if isinstance(exc, (ValueError, OSError)) else describe_error(exc)


def _ok(error: str | BaseException | None) -> bool:
    # As the service answers kubelet: an empty error text is success.
    return error is None or not error_text(error)


class MetadataPlugin:
    """The driver's plugin, with the metadata files written after its prepare and removed
    after its unprepare: what the helper (and its checkpoint) calls, so that the files and
    the metadata CDI device IDs are part of what a claim's preparation recorded."""

    def __init__(self, plugin: Plugin, writer: MetadataWriter) -> None:
        self.plugin = plugin
        self.writer = writer

    def prepare_resource_claims(
        self, claims: list[ResourceClaim]
    ) -> PrepareResults | Awaitable[PrepareResults]:
        got = self.plugin.prepare_resource_claims(claims)
        if inspect.isawaitable(got):
            return self._prepared_async(claims, got)
        return self._prepared(claims, got)

    async def _prepared_async(
        self, claims: list[ResourceClaim], got: Awaitable[PrepareResults]
    ) -> PrepareResults:
        results = await got
        # Off the driver's loop: files are synced. The thread gets this context (the
        # checkpoint's journal of the call).
        return await asyncio.to_thread(self._prepared, claims, results)

    def _prepared(self, claims: list[ResourceClaim], results: PrepareResults) -> PrepareResults:
        out = dict(results)
        for claim in claims:
            meta = claim["metadata"]
            result = out.get(meta["uid"])
            if result is None or not _ok(result.error):
                continue
            try:
                ids = self.writer.write_claim(claim, result.devices)
            except Exception as exc:
                # The error below is the one that matters; unprepare removes it all.
                with contextlib.suppress(Exception):
                    self.writer.remove_claim(meta["namespace"], meta["name"], meta["uid"])
                out[meta["uid"]] = PrepareResult(error=f"writing the device metadata: {_text(exc)}")
                continue
            out[meta["uid"]] = dataclasses.replace(
                result, devices=with_metadata_ids(result.devices, ids)
            )
        return out

    def unprepare_resource_claims(
        self, claims: list[ClaimRef]
    ) -> UnprepareResults | Awaitable[UnprepareResults]:
        got = self.plugin.unprepare_resource_claims(claims)
        if inspect.isawaitable(got):
            return self._unprepared_async(claims, got)
        return self._unprepared(claims, got)

    async def _unprepared_async(
        self, claims: list[ClaimRef], got: Awaitable[UnprepareResults]
    ) -> UnprepareResults:
        results = await got
        return await asyncio.to_thread(self._unprepared, claims, results)

    def _unprepared(self, claims: list[ClaimRef], results: UnprepareResults) -> UnprepareResults:
        out: dict[str, str | BaseException | None] = dict(results)
        for ref in claims:
            if ref.uid not in out or not _ok(out[ref.uid]):
                continue
            try:
                self.writer.remove_claim(ref.namespace, ref.name, ref.uid)
            except Exception as exc:
                out[ref.uid] = f"clean up device metadata: {_text(exc)}"
        return out


def with_metadata_ids(
    devices: Sequence[PreparedDevice], ids: Mapping[str, str]
) -> list[PreparedDevice]:
    """``devices`` with the metadata CDI device ID of each request added to the first device
    of it (as Go's helper adds them to its answer): kubelet gives a container using a request
    the IDs of all its devices."""
    added: set[str] = set()
    out = []
    for device in devices:
        extra = []
        for request in device.requests:
            base = base_request(request)
            if base in ids and base not in added:
                extra.append(ids[base])
                added.add(base)
        out.append(
            dataclasses.replace(device, cdi_device_ids=[*device.cdi_device_ids, *extra])
            if extra
            else device
        )
    return out


__all__ = [
    "CONTAINER_DIR",
    "METADATA_V1ALPHA1",
    "METADATA_V1BETA1",
    "MetadataPlugin",
    "MetadataWriter",
    "container_path",
    "decode_first",
    "metadata_problems",
]
