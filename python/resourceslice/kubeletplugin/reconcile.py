"""What a kubelet plugin puts right when it starts, from its checkpoint: the CDI spec files,
and the recorded claims that no longer exist
(:class:`~resourceslice.kubeletplugin.prepared.Checkpoint` runs both).

- The recorded CDI specs are written again where they are missing or differ
  (``/var/run/cdi`` is often a tmpfs, which a reboot empties), and the driver's spec files of
  claims that are not recorded are removed (a crash between writing a spec and recording the
  claim leaves one), with the temporary files of an interrupted write.
- Each recorded claim is read from the apiserver: one deleted, or replaced by another of the
  same name, no longer exists, and its record goes to the driver's unprepare (once).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from resourceslice._errortext import describe_error
from resourceslice.controller import ErrorHandler
from resourceslice.kubeletplugin.cdi import claim_spec_files, write_spec_file
from resourceslice.kubeletplugin.types import ClaimRecord, ClaimRef

#: The claim ``(namespace, name)`` as the apiserver has it now; None when there is none.
ReadClaim = Callable[[str, str], Optional[Mapping[str, Any]]]


@dataclass
class Reconciliation:
    """What the helper put right when it started (``Checkpoint.wait_reconciled``).

    ``set_aside``: where an unreadable checkpoint was moved (its records are lost: the
    driver is called again for those claims). ``cdi_specs_restored``,
    ``cdi_specs_removed``: spec files written again from the records, and the driver's files
    of claims not recorded. ``unprepared``: recorded claims that no longer exist, which the
    driver unprepared; ``unprepare_failed``: those it failed to (UID: error; kept for the
    next start); ``unchecked``: records whose claim could not be read (UID: error; kept).
    ``unusable``: why the checkpoint could not be used at all (nothing else was done).
    ``deferred``: another instance (the old pod of a rolling update) held the lock at start,
    so nothing was done: kubelet's first call reads the file and puts the CDI directories
    right, and no claim is looked up (the other instance was serving kubelet meanwhile).
    """

    set_aside: str | None = None
    deferred: bool = False
    unusable: str | None = None
    cdi_specs_restored: list[str] = field(default_factory=list)
    cdi_specs_removed: list[str] = field(default_factory=list)
    unprepared: list[ClaimRef] = field(default_factory=list)
    unprepare_failed: dict[str, str] = field(default_factory=dict)
    unchecked: dict[str, str] = field(default_factory=dict)


def restore_specs(
    records: Iterable[ClaimRecord], report: Reconciliation, error_handler: ErrorHandler
) -> None:
    """Write each recorded spec that is missing or differs (into ``report``)."""
    # A file that cannot be written is reported, not raised: a plugin that does not start is
    # restarted, and would fail the same way again.
    for record in records:
        for path, spec in record.cdi_specs.items():
            if _read_json(Path(path)) != spec:
                try:
                    write_spec_file(Path(path), spec)
                except OSError as exc:
                    error_handler(exc, f"CDI spec {path} not restored")
                    continue
                report.cdi_specs_restored.append(path)


def remove_unrecorded_specs(
    driver: str,
    directories: Iterable[str],
    recorded: Mapping[str, ClaimRecord],
    report: Reconciliation,
    error_handler: ErrorHandler,
) -> None:
    """Remove ``driver``'s spec files of claims not ``recorded`` from ``directories``, and
    the temporary files of interrupted writes (into ``report``)."""
    for directory in sorted(directories):
        for uid, path, temporary in claim_spec_files(driver, Path(directory)):
            if temporary or uid not in recorded:
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    error_handler(exc, f"CDI spec {path} not removed")
                    continue
                report.cdi_specs_removed.append(str(path))


def gone_claims(
    records: Iterable[ClaimRecord],
    read_claim: ReadClaim,
    stopping: threading.Event,
    report: Reconciliation,
) -> list[ClaimRecord]:
    """The records whose claim no longer exists (deleted, or another of the same name);
    those that could not be read go to ``report.unchecked``. Ends early once ``stopping``."""
    gone: list[ClaimRecord] = []
    for record in records:
        if stopping.is_set():
            break
        try:
            claim = read_claim(record.namespace, record.name)
        except Exception as exc:
            report.unchecked[record.uid] = describe_error(exc)
            continue
        if claim is None or (claim.get("metadata") or {}).get("uid") != record.uid:
            gone.append(record)
    return gone


def _read_json(path: Path) -> Any:
    """The file's JSON; None when it is missing or not JSON."""
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_bytes())
    return None


__all__ = ["ReadClaim", "Reconciliation", "gone_claims", "remove_unrecorded_specs", "restore_specs"]
