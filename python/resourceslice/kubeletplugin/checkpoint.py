"""The checkpoint file of prepared claims: one JSON file in the plugin data directory.

kubelet's unprepare call names a claim only (namespace, name, UID), and kubelet repeats
prepare calls (after a plugin crash, after its own restart). So what a prepare did must
outlive the process: the helper records each claim the driver prepared, with what prepare
returned and what the driver chose to record (``PrepareResult.data``), in this file, before
kubelet gets the answer (see :mod:`~resourceslice.kubeletplugin.prepared` for what the
helper does with it).

The file is ``{"version": 1, "checksum": "sha256:<hex>", "checkpoint": {...}}``: the checksum
is that of the canonical JSON of ``checkpoint`` (keys sorted, no spaces). It is replaced
atomically (written to a temporary file, synced, renamed, the directory synced), so a crash
leaves the old file or the new one, never half of one.

What is not a readable file of this version:

- **a file that is not this format** (not JSON, a checksum that does not match, a record
  that does not parse): it is renamed to ``<name>.corrupt-<time>``, kept for whoever wants
  to look at it, and the checkpoint starts empty. The loss is reported (error handler, log,
  metrics) and bounded by the contract every driver keeps anyway: prepare is idempotent
  (kubelet's next prepare of those claims calls the driver again) and unprepare works without
  a record (``record`` is None).
- **a file of another version** (a newer build's, after a downgrade): it is left as it is,
  and every prepare and unprepare fails with the reason until an operator upgrades again or
  moves the file away. Its records mean something to the build that wrote them only; serving
  without them would lose them, overwriting them would lose them for good.

Neither raises from :func:`~resourceslice.kubeletplugin.start`: a plugin that cannot start
is restarted by its DaemonSet, and would fail the same way again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resourceslice.api import ResourceSliceError
from resourceslice.kubeletplugin.claims import ResourceClaim
from resourceslice.kubeletplugin.types import ClaimRecord, PreparedDevice

log = logging.getLogger("resourceslice.kubeletplugin")

#: The file's name in the plugin data directory. Not ``checkpoint.json``: Go's example
#: driver keeps its own under that name there, and a driver moving from Go keeps its file.
FILE_NAME = "resourceslice-checkpoint.json"
#: The version this build writes and reads.
VERSION = 1


class CheckpointError(ResourceSliceError):
    """The checkpoint file cannot be used (another version's, unreadable); the message says
    why and what to do."""


def canonical(value: Any) -> str:
    """``value`` as JSON in one form only: what the checksum is taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def allocation_digest(claim: ResourceClaim, driver: str) -> str:
    """What identifies the claim's allocation for ``driver``: its devices of the driver
    (request, pool, device, share ID) and the driver's configuration in the allocation.

    A claim's allocation cannot change in place, but a claim can be deallocated and allocated
    again under the same UID; that is another preparation. Fields the apiserver may add to a
    result on a newer release are left out, so that an upgrade does not look like one.
    """
    devices = claim["status"]["allocation"]["devices"]
    results = [
        [r.get("request"), r.get("pool"), r.get("device"), r.get("shareID")]
        for r in devices.get("results") or ()
        if r.get("driver") == driver
    ]
    config = [
        c
        for c in devices.get("config") or ()
        if "opaque" in c and c["opaque"].get("driver") == driver
    ]
    return hashlib.sha256(canonical([results, config]).encode()).hexdigest()[:32]


def _device_json(device: PreparedDevice) -> dict[str, Any]:
    out: dict[str, Any] = {
        "pool": device.pool_name,
        "device": device.device_name,
        "requests": list(device.requests),
        "cdiDeviceIDs": list(device.cdi_device_ids),
    }
    if device.share_id is not None:
        out["shareID"] = device.share_id
    return out


def record_json(record: ClaimRecord) -> dict[str, Any]:
    """A record as it is stored (:func:`check_json` says whether it can be)."""
    return {
        "namespace": record.namespace,
        "name": record.name,
        "allocation": record.allocation,
        "preparedAt": record.prepared_at,
        "devices": [_device_json(d) for d in record.devices],
        "data": record.data,
        "cdiSpecs": dict(record.cdi_specs),
    }


def check_json(record: ClaimRecord) -> None:
    """ValueError (or TypeError) when the record cannot be stored: its ``data`` is not JSON.
    Checked as a record is added, so that a save fails for the disk only."""
    canonical(record_json(record))


def _record(uid: str, stored: Mapping[str, Any]) -> ClaimRecord:
    devices = tuple(
        PreparedDevice(
            pool_name=str(d["pool"]),
            device_name=str(d["device"]),
            requests=[str(r) for r in d["requests"]],
            cdi_device_ids=[str(i) for i in d["cdiDeviceIDs"]],
            share_id=d.get("shareID"),
        )
        for d in stored["devices"]
    )
    specs = stored["cdiSpecs"]
    if not isinstance(specs, dict):
        raise TypeError(f"cdiSpecs of claim {uid} is not an object")
    return ClaimRecord(
        uid=uid,
        namespace=str(stored["namespace"]),
        name=str(stored["name"]),
        devices=devices,
        data=stored["data"],
        cdi_specs=specs,
        allocation=str(stored["allocation"]),
        prepared_at=float(stored["preparedAt"]),
    )


@dataclass
class State:
    """What the file holds: the records by claim UID, and every directory a CDI spec of a
    record was ever written to (swept at start for specs of claims not recorded)."""

    records: dict[str, ClaimRecord] = field(default_factory=dict)
    cdi_dirs: set[str] = field(default_factory=set)


def _parse(document: Any) -> State:
    """The state in a file's parsed JSON; ValueError (or KeyError, TypeError) when it is not
    this version's format, CheckpointError when it is another version's."""
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    version = document.get("version")
    if version != VERSION:
        raise CheckpointError(f"version {version!r}, and this build reads version {VERSION} only")
    body = document["checkpoint"]
    digest = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
    if document.get("checksum") != digest:
        raise ValueError(f"checksum {document.get('checksum')!r} does not match its content")
    state = State(cdi_dirs={str(d) for d in body["cdiDirs"]})
    for uid, stored in body["claims"].items():
        state.records[uid] = _record(uid, stored)
    return state


class CheckpointFile:
    """The checkpoint file of one plugin: load it once, then save each change.

    ``state`` is what the file holds since the last :meth:`load`, :meth:`refresh` or
    :meth:`save`; a failed save leaves both as they were. Not thread-safe: the helper calls
    it under its one-call-at-a-time lock, which a rolling update's two instances share, so
    :meth:`refresh` before each use reads what the other instance wrote.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / FILE_NAME
        self.state = State()
        #: Why the file cannot be used (another version); None when it can.
        self.unusable: str | None = None
        #: Why the file last set aside was (what :meth:`load` returned).
        self.unreadable: str | None = None
        # The file as last read or written (device, inode, size, mtime): another one is
        # another writer's.
        self._seen: tuple[int, int, int, int] | None = None

    def _stat(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def load(self) -> Path | None:
        """Read the file (none: an empty checkpoint). Returns where an unreadable file was
        set aside (None when it was read, or missing); another version's makes
        :attr:`unusable` say why and leaves the state empty."""
        self.state, self.unusable = State(), None
        seen = self._stat()
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            self._seen = None
            return None
        except OSError as exc:
            self.unusable = f"the checkpoint {self.path} cannot be read: {exc}"
            self._seen = seen
            return None
        try:
            self.state = _parse(json.loads(text))
        except CheckpointError as exc:
            self.unusable = (
                f"the checkpoint {self.path} is of {exc}: upgrade the driver again, or move "
                "the file away (its records are then lost)"
            )
            self._seen = seen
            return None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            aside = self.path.with_name(
                f"{FILE_NAME}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
            )
            try:
                os.replace(self.path, aside)
                _sync_dir(self.path.parent)
            except OSError as move:
                # Not kept aside, it would be overwritten by the next save: nothing is saved.
                self.unusable = (
                    f"the checkpoint {self.path} is unreadable ({exc}) and could not be moved "
                    f"aside ({move}): move it away"
                )
                self._seen = seen
                return None
            self.unreadable = f"{type(exc).__name__}: {exc}"
            log.error(
                "checkpoint %s is unreadable (%s): kept as %s, starting with no records",
                self.path,
                self.unreadable,
                aside,
            )
            self._seen = None
            return aside
        self._seen = seen
        return None

    def refresh(self) -> Path | None:
        """:meth:`load` again if the file is not the one last read or written (another
        instance of the driver wrote it, in a rolling update); as :meth:`load` returns."""
        if self._stat() == self._seen:
            return None
        return self.load()

    def save(self, records: Mapping[str, ClaimRecord], cdi_dirs: Iterable[str] = ()) -> None:
        """Replace the file with ``records`` (and the CDI directories known so far, plus
        ``cdi_dirs``), atomically and durably; then they are :attr:`state`. OSError (the
        disk) or ValueError (a record's data that is not JSON) leave the file and the state
        as they were."""
        if self.unusable is not None:
            raise CheckpointError(self.unusable)
        dirs = self.state.cdi_dirs | set(cdi_dirs)
        body = {
            "claims": {uid: record_json(r) for uid, r in records.items()},
            "cdiDirs": sorted(dirs),
        }
        text = canonical(body)
        checksum = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
        # The body as it was hashed, inside the envelope: one serialisation per save.
        document = f'{{"version":{VERSION},"checksum":"{checksum}","checkpoint":{text}}}\n'
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{FILE_NAME}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(document)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        # The rename is durable once the directory is: a reboot must not bring back the
        # file before it.
        _sync_dir(self.path.parent)
        self.state = State(records=dict(records), cdi_dirs=dirs)
        self._seen = self._stat()


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = [
    "FILE_NAME",
    "VERSION",
    "CheckpointError",
    "CheckpointFile",
    "State",
    "allocation_digest",
    "check_json",
]
