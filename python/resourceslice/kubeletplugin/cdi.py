"""CDI spec files for the devices a kubelet plugin prepares.

kubelet hands the CDI device IDs of a prepared claim to the container runtime, which looks
them up in the spec files of its CDI directories (``/var/run/cdi`` by default) and applies
their container edits (environment, device nodes, mounts, hooks). One spec file per claim
keeps unprepare simple: the file goes, and with it every device of the claim.

What a writer writes for a claim while the helper runs the driver's prepare is recorded with
the claim in the checkpoint (:func:`journal`), so that the helper can restore the file when it
is gone (``/var/run/cdi`` is often a tmpfs, which a reboot empties) and remove the driver's
files of claims that are not prepared (:func:`claim_spec_files`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from resourceslice.kubeletplugin.registration import check_driver_name

#: Where container runtimes look for CDI specs unless configured otherwise.
DEFAULT_CDI_DIR = "/var/run/cdi"
#: The spec version written: env, deviceNodes, mounts and hooks are all in 0.6.0, which
#: containerd 1.7 and CRI-O 1.28 read.
DEFAULT_CDI_VERSION = "0.6.0"

# A CDI device name: alphanumerics, "-", "_", ".", ":", alphanumeric at both ends.
_DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
# Claim UIDs go into file names: nothing that can leave the directory.
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
# The vendor and the class of a CDI kind (``vendor/class``) alike: a letter first, then
# alphanumerics, "-", "_", ".", alphanumeric at the end (the CDI parser's rule).
_VENDOR_OR_CLASS = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
# The UIDs the apiserver gives objects. Only a file named with one is taken for a claim's
# spec when directories are swept: a driver named ``x`` then never takes the files of a driver
# named ``x-y`` (``x-y-<uid>.json``) for its own.
_APISERVER_UID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


class Journal:
    """What writers do while the helper runs a prepare call: per claim UID, the spec files
    written (``claims[uid][path]``: the spec) or removed (None). ``before_write(directory)``
    is called before a writer first writes into a directory (the helper records it, so that
    a crash right after the write leaves a spec it will look for)."""

    def __init__(self, before_write: Callable[[Path], None] | None = None) -> None:
        self.claims: dict[str, dict[str, dict[str, Any] | None]] = {}
        self._before_write = before_write
        self._directories: set[Path] = set()

    def directory(self, directory: Path) -> None:
        if self._before_write is not None and directory not in self._directories:
            self._before_write(directory)
            self._directories.add(directory)

    def note(self, claim_uid: str, path: Path, spec: dict[str, Any] | None) -> None:
        self.claims.setdefault(claim_uid, {})[str(path)] = spec


# A context variable, so that it follows the call into a coroutine callback (asyncio copies
# the context into the tasks it starts).
_journal: ContextVar[Journal | None] = ContextVar("resourceslice_cdi_journal", default=None)


@contextlib.contextmanager
def journal(before_write: Callable[[Path], None] | None = None) -> Iterator[Journal]:
    """What writers write and remove in this context (and tasks started from it)."""
    written = Journal(before_write)
    token = _journal.set(written)
    try:
        yield written
    finally:
        _journal.reset(token)


def write_spec_file(path: Path, spec: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``spec`` atomically (a runtime never reads half of it), durably
    (synced before the rename), readable by the runtime (0644)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(spec, out, indent=2)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_claim_spec(claim_uid: str, path: Path, spec: Mapping[str, Any]) -> None:
    """Write a spec file of a claim (:func:`write_spec_file`), noted in the journal of the
    prepare call under way, if any: the checkpoint then restores it and removes it with the
    claim."""
    written = _journal.get()
    if written is not None:
        written.directory(path.parent)
    write_spec_file(path, spec)
    if written is not None:
        written.note(claim_uid, path, dict(spec))


def remove_claim_spec(claim_uid: str, path: Path) -> None:
    """Remove a spec file of a claim (nothing to do when there is none), noted in the
    journal as :func:`write_claim_spec` does."""
    path.unlink(missing_ok=True)
    written = _journal.get()
    if written is not None:
        written.note(claim_uid, path, None)


def claim_spec_files(driver: str, cdi_dir: Path) -> Iterator[tuple[str, Path, bool]]:
    """``(claim UID, path, temporary)`` of each file in ``cdi_dir`` that a
    :class:`CDISpecWriter` of ``driver`` writes for a claim: its specs, and the temporary
    files of a write that a crash interrupted (``temporary``)."""
    name = re.compile(
        rf"(?:\.)?{re.escape(driver)}-(?P<uid>{_APISERVER_UID})\.json(?P<tmp>\..+\.tmp)?"
    )
    try:
        entries = list(os.scandir(cdi_dir))
    except FileNotFoundError:
        return
    for entry in entries:
        match = name.fullmatch(entry.name)
        # A temporary file starts with a dot, a spec does not.
        if match and entry.name.startswith(".") == bool(match["tmp"]):
            yield match["uid"], Path(entry.path), bool(match["tmp"])


class CDISpecWriter:
    """Writes and removes one CDI spec file per prepared claim.

    The devices of a claim are named ``<claim uid>-<device>`` in the kind
    ``<driver>/<device_class>``, so two claims never share a CDI device, and their IDs
    (``<driver>/<device_class>=<claim uid>-<device>``) go into the prepare result's
    ``cdi_device_ids``.
    """

    def __init__(
        self,
        driver: str,
        *,
        cdi_dir: str | os.PathLike[str] = DEFAULT_CDI_DIR,
        device_class: str = "device",
        cdi_version: str = DEFAULT_CDI_VERSION,
    ) -> None:
        check_driver_name(driver)  # before it goes into a path
        if not _VENDOR_OR_CLASS.fullmatch(driver):
            raise ValueError(
                f"driver {driver!r} is not a CDI vendor name (a letter first, then letters, "
                "digits, '-', '_', '.', a letter or digit last)"
            )
        if not _VENDOR_OR_CLASS.fullmatch(device_class):
            raise ValueError(
                f"device_class {device_class!r} is not a CDI class name (a letter first, then "
                "letters, digits, '-', '_', '.', a letter or digit last)"
            )
        self.driver = driver
        self.cdi_dir = Path(cdi_dir)
        self.kind = f"{driver}/{device_class}"
        self.cdi_version = cdi_version

    def spec_path(self, claim_uid: str) -> Path:
        if not _UID.fullmatch(claim_uid):
            raise ValueError(f"claim UID {claim_uid!r} cannot be part of a file name")
        return self.cdi_dir / f"{self.driver}-{claim_uid}.json"

    def device_id(self, claim_uid: str, device: str) -> str:
        """The CDI device ID of ``device`` of the claim (what the runtime is given)."""
        return f"{self.kind}={claim_uid}-{device}"

    def write_claim(
        self, claim_uid: str, devices: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, str]:
        """Write the claim's spec: ``devices`` maps a device name to its CDI
        ``containerEdits`` (``{"env": ["A=1"], "deviceNodes": [{"path": "/dev/x"}], ...}``).

        Returns the CDI device ID of each device. The file is replaced atomically: a
        runtime never reads half of it, and preparing the same claim again rewrites it.
        """
        path = self.spec_path(claim_uid)
        spec_devices = []
        for name, edits in devices.items():
            cdi_name = f"{claim_uid}-{name}"
            if not _DEVICE_NAME.fullmatch(cdi_name):
                raise ValueError(f"device name {name!r} cannot be part of a CDI device name")
            spec_devices.append({"name": cdi_name, "containerEdits": dict(edits)})
        spec = {"cdiVersion": self.cdi_version, "kind": self.kind, "devices": spec_devices}
        write_claim_spec(claim_uid, path, spec)
        return {name: self.device_id(claim_uid, name) for name in devices}

    def remove_claim(self, claim_uid: str) -> None:
        """Remove the claim's spec; nothing to do if there is none (unprepare is repeated)."""
        remove_claim_spec(claim_uid, self.spec_path(claim_uid))
