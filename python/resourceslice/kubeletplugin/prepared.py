"""The claims a kubelet plugin prepared: kubelet's calls answered through the checkpoint, and
what the helper puts right when it starts.

- **prepare**: a claim recorded with the same allocation is answered with its record, and
  the driver is not called (a repeated prepare: kubelet retries after a plugin crash, and
  prepares every pod's claims again after its own restart). A claim recorded with another
  allocation (deallocated, then allocated again under the same UID) is unprepared first
  (the driver gets the old record), then prepared as a new one. Every other claim goes to
  the driver; what it prepared is recorded, and the file written, before kubelet is
  answered.
- **unprepare**: the driver gets each claim's record (``ClaimRef.record``); once it
  succeeded, the record goes, and the CDI specs recorded with it.
- **at start**, before kubelet can call: the CDI directories are put right; then, in the
  background, the recorded claims that no longer exist are handed to the driver's unprepare,
  once; a failure is reported, and the record kept for the next start (or for kubelet's own
  unprepare). What each step does: :mod:`~resourceslice.kubeletplugin.reconcile`.

The file, and what happens to one that cannot be read:
:mod:`~resourceslice.kubeletplugin.checkpoint`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from resourceslice._errortext import describe_error
from resourceslice.controller import ErrorHandler
from resourceslice.kubeletplugin.callbacks import CallbackLoop
from resourceslice.kubeletplugin.cdi import journal, write_spec_file
from resourceslice.kubeletplugin.checkpoint import (
    CheckpointError,
    CheckpointFile,
    allocation_digest,
    check_json,
)
from resourceslice.kubeletplugin.claims import ResourceClaim
from resourceslice.kubeletplugin.reconcile import (
    ReadClaim,
    Reconciliation,
    gone_claims,
    remove_unrecorded_specs,
    restore_specs,
)
from resourceslice.kubeletplugin.serialize import Serializer
from resourceslice.kubeletplugin.service import error_text
from resourceslice.kubeletplugin.types import (
    ClaimRecord,
    ClaimRef,
    Plugin,
    PrepareResult,
    UnprepareResults,
)

log = logging.getLogger("resourceslice.kubeletplugin")


_NO_RESULT = "the driver returned no result for this claim"


@dataclass(frozen=True)
class CheckpointStats:
    """What the checkpoint did since the plugin started (the metrics read these).

    ``answered``: prepares answered from a record, without the driver; ``recorded``: claims
    the driver prepared and that were recorded; ``removed``: records removed after the
    driver unprepared their claim; ``reallocated``: recorded claims found allocated anew
    (unprepared, then prepared again). The rest count what :class:`Reconciliation` lists,
    and checkpoint writes that failed.
    """

    records: int
    usable: bool
    answered: int = 0
    recorded: int = 0
    removed: int = 0
    reallocated: int = 0
    write_errors: int = 0
    set_aside: int = 0
    cdi_specs_restored: int = 0
    cdi_specs_removed: int = 0
    claims_unprepared: int = 0
    claims_unprepare_failed: int = 0
    claims_unchecked: int = 0


def _ok(error: str | BaseException | None) -> bool:
    # As the service answers kubelet: an empty error text is success.
    return error is None or not error_text(error)


class Checkpoint:
    """The checkpoint of the claims a kubelet plugin prepared: ``helper.checkpoint``.

    ``path`` is its file; :meth:`records` what it holds now; :meth:`stats` its counters;
    :meth:`wait_reconciled` what was put right at start. The helper calls the rest, under
    its one-call-at-a-time lock.
    """

    def __init__(
        self,
        directory: str,
        *,
        driver: str,
        plugin: Plugin,
        loop: CallbackLoop,
        serializer: Serializer,
        error_handler: ErrorHandler,
    ) -> None:
        self.driver = driver
        self._file = CheckpointFile(directory)
        self._plugin = plugin
        self._loop = loop
        self._serializer = serializer
        # The CDI directories are put right under the lock, before kubelet's first call.
        self._files_pending = True
        self._error_handler = error_handler
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self._reconciled = threading.Event()
        self._reconciler: threading.Thread | None = None
        #: What the start put right; None until it is done.
        self.reconciliation: Reconciliation | None = None
        self._report = Reconciliation()

    @property
    def path(self) -> Path:
        return self._file.path

    def records(self) -> dict[str, ClaimRecord]:
        """The records by claim UID, as last read or written."""
        return dict(self._file.state.records)

    def stats(self) -> CheckpointStats:
        with self._counts_lock:
            counts = dict(self._counts)
        return CheckpointStats(
            records=len(self._file.state.records), usable=self._file.unusable is None, **counts
        )

    def wait_reconciled(self, timeout: float | None = None) -> Reconciliation | None:
        """Block until the start's reconciliation is done (its report), or time out (None)."""
        return self.reconciliation if self._reconciled.wait(timeout) else None

    def _count(self, what: str, n: int = 1) -> None:
        if n:
            with self._counts_lock:
                self._counts[what] += n

    # -- kubelet's calls (under the helper's lock) ---------------------------------------

    def _refresh(self) -> None:
        """Under the lock, before using the state: what another instance wrote is read, and
        the start's work on the files is done if it could not be then."""
        if self._files_pending:
            self._reconcile_files()
            return
        aside = self._file.refresh()
        if aside is not None:
            self._count("set_aside")
            self._error_handler(self._set_aside_error(aside), "checkpoint records lost")

    def _set_aside_error(self, aside: Path) -> ValueError:
        return ValueError(
            f"the checkpoint {self.path} was unreadable ({self._file.unreadable}): kept as {aside}"
        )

    def prepare(
        self, claims: Sequence[ResourceClaim], deadline: float | None
    ) -> dict[str, PrepareResult]:
        """Answer each claim from its record, or have the driver prepare it and record it."""
        self._refresh()
        if self._file.unusable is not None:
            return {c["metadata"]["uid"]: PrepareResult(error=self._file.unusable) for c in claims}
        results: dict[str, PrepareResult] = {}
        digests: dict[str, str] = {}
        fresh: list[ResourceClaim] = []
        reallocated: list[ClaimRef] = []
        for claim in claims:
            meta = claim["metadata"]
            uid = meta["uid"]
            digests[uid] = allocation_digest(claim, self.driver)
            record = self._file.state.records.get(uid)
            if record is None:
                fresh.append(claim)
            elif record.allocation == digests[uid]:
                results[uid] = self._answer(record)
            else:
                log.info(
                    "claim %s/%s (%s) was prepared for another allocation: unpreparing it first",
                    meta["namespace"],
                    meta["name"],
                    uid,
                )
                reallocated.append(ClaimRef(meta["namespace"], meta["name"], uid))
        if reallocated:
            self._count("reallocated", len(reallocated))
            undone = self._unprepare(reallocated, deadline)
            for claim in claims:
                uid = claim["metadata"]["uid"]
                if uid not in undone:
                    continue
                if undone[uid] is None:
                    fresh.append(claim)
                else:
                    results[uid] = PrepareResult(
                        error="the claim was prepared for another allocation, and unpreparing "
                        f"that failed: {error_text(undone[uid] or '')}"
                    )
        if fresh:
            results.update(self._prepare(fresh, digests, deadline))
        return results

    def _answer(self, record: ClaimRecord) -> PrepareResult:
        """A repeated prepare: the record, with its CDI specs written again where they are
        gone (a reboot emptied the directory; the runtime reads them next)."""
        for path, spec in record.cdi_specs.items():
            if not Path(path).exists():
                try:
                    write_spec_file(Path(path), spec)
                except OSError as exc:
                    return PrepareResult(error=f"restoring the claim's CDI spec {path}: {exc}")
                log.warning("restored the CDI spec %s of claim %s", path, record.uid)
                self._count("cdi_specs_restored")
        self._count("answered")
        return record.result()

    def _prepare(
        self, claims: list[ResourceClaim], digests: Mapping[str, str], deadline: float | None
    ) -> dict[str, PrepareResult]:
        """The driver's prepare, and its successes recorded (the file written once)."""
        with journal(self._before_cdi_write) as written:
            try:
                got = self._loop.resolve(self._plugin.prepare_resource_claims(claims), deadline)
            except Exception as exc:
                self._error_handler(exc, "prepare_resource_claims failed")
                got = {c["metadata"]["uid"]: PrepareResult(error=exc) for c in claims}
        results: dict[str, PrepareResult] = {}
        added: dict[str, ClaimRecord] = {}
        now = time.time()
        for claim in claims:
            meta = claim["metadata"]
            uid = meta["uid"]
            result = got.get(uid) or PrepareResult(error=_NO_RESULT)
            results[uid] = result
            if not _ok(result.error):
                continue
            specs = {p: s for p, s in written.claims.get(uid, {}).items() if s is not None}
            record = ClaimRecord(
                uid=uid,
                namespace=meta["namespace"],
                name=meta["name"],
                # Copies: the driver's objects may change after it returned them.
                devices=tuple(
                    dataclasses.replace(
                        d, requests=list(d.requests), cdi_device_ids=list(d.cdi_device_ids)
                    )
                    for d in result.devices
                ),
                data=result.data,
                cdi_specs=specs,
                allocation=digests[uid],
                prepared_at=now,
            )
            try:
                check_json(record)
            except (TypeError, ValueError) as exc:
                results[uid] = PrepareResult(error=f"the prepare result's data is not JSON: {exc}")
                continue
            added[uid] = record
        if not added:
            return results
        dirs = {str(Path(p).parent) for r in added.values() for p in r.cdi_specs}
        try:
            self._file.save({**self._file.state.records, **added}, dirs)
        except Exception as exc:
            # Not recorded, so not prepared as far as kubelet knows: it retries, and the driver
            # is called again (prepare is idempotent up to the record).
            self._count("write_errors")
            self._error_handler(exc, "the checkpoint was not written")
            for uid in added:
                results[uid] = PrepareResult(
                    error=f"prepared, but the checkpoint was not written: {describe_error(exc)}"
                )
            return results
        self._count("recorded", len(added))
        return results

    def _before_cdi_write(self, directory: Path) -> None:
        """A directory the driver writes CDI specs into is recorded before its first spec,
        which a crash right after would leave behind unrecorded: the next start looks there.
        (On the thread of the driver's callback, while the call holds the lock.)"""
        if str(directory) not in self._file.state.cdi_dirs:
            self._file.save(self._file.state.records, {str(directory)})

    def unprepare(self, refs: Sequence[ClaimRef], deadline: float | None) -> UnprepareResults:
        """The driver's unprepare with each claim's record; records of successes removed."""
        self._refresh()
        if self._file.unusable is not None:
            return {ref.uid: self._file.unusable for ref in refs}
        return self._unprepare(refs, deadline)

    def _unprepare(
        self, refs: Sequence[ClaimRef], deadline: float | None
    ) -> dict[str, str | BaseException | None]:
        records = self._file.state.records
        with_records = [dataclasses.replace(r, record=records.get(r.uid)) for r in refs]
        try:
            got = self._loop.resolve(self._plugin.unprepare_resource_claims(with_records), deadline)
        except Exception as exc:
            self._error_handler(exc, "unprepare_resource_claims failed")
            return {ref.uid: exc for ref in refs}
        results = {ref.uid: got.get(ref.uid, _NO_RESULT) for ref in refs}
        done = [r.record for r in with_records if r.record is not None and _ok(results[r.uid])]
        if not done:
            return results
        gone = {record.uid for record in done}
        try:
            self._file.save({u: r for u, r in records.items() if u not in gone})
        except Exception as exc:
            # Kept, so kubelet is told: it retries, and the driver gets the record again.
            self._count("write_errors")
            self._error_handler(exc, "the checkpoint was not written")
            for uid in gone:
                results[uid] = "unprepared, but the checkpoint was not written: " + describe_error(
                    exc
                )
            return results
        self._count("removed", len(done))
        # After the save: a crash in between leaves a spec of a claim not recorded, which
        # the next start removes (the other order would have it restore the spec).
        for record in done:
            for path in record.cdi_specs:
                try:
                    Path(path).unlink(missing_ok=True)
                except OSError as exc:
                    log.warning("CDI spec %s of claim %s not removed: %s", path, record.uid, exc)
        return results

    # -- at start ------------------------------------------------------------------------

    def start(self, read_claim: ReadClaim, stopping: threading.Event) -> None:
        """Read the file and put the CDI directories right, under the helper's lock, before
        kubelet can call; then look for claims that are gone, on a thread of its own
        (:meth:`join` waits for it; ``stopping`` ends it early).

        The claims are not looked up here: the apiserver may be slow to answer, and a
        coroutine callback needs a loop that the caller of ``start()`` may be running. Nor is
        the lock waited for: an old instance of a rolling update may hold it through a long
        prepare, and the new one registers meanwhile; the files are then put right by the
        first step that holds the lock (every step re-reads the file under it, so any order
        is consistent).
        """
        self._file.path.parent.mkdir(parents=True, exist_ok=True)  # the lock's file is there
        with self._serializer.try_hold() as held:
            if held:
                self._reconcile_files()
            else:
                log.info("another instance holds the lock: the checkpoint is read later")
        self._reconciler = threading.Thread(
            target=self._reconcile,
            args=(read_claim, stopping),
            name="kubeletplugin-reconcile",
            daemon=True,
        )
        self._reconciler.start()

    def join(self) -> None:
        """Wait for the start's reconciliation to end."""
        if self._reconciler is not None:
            self._reconciler.join()

    def _reconcile_files(self) -> None:
        self._files_pending = False
        report = self._report
        aside = self._file.load()
        if aside is not None:
            report.set_aside = str(aside)
            self._count("set_aside")
            self._error_handler(
                self._set_aside_error(aside),
                "checkpoint records lost: the driver prepares those claims again",
            )
        if self._file.unusable is not None:
            report.unusable = self._file.unusable
            self._error_handler(
                CheckpointError(self._file.unusable),
                "the checkpoint cannot be used: prepare and unprepare fail until it can",
            )
            return
        records = self._file.state.records
        restore_specs(records.values(), report, self._error_handler)
        # After a set-aside nothing is known of what is prepared: every spec would go.
        if aside is None:
            dirs = self._file.state.cdi_dirs
            remove_unrecorded_specs(self.driver, dirs, records, report, self._error_handler)
        self._count("cdi_specs_restored", len(report.cdi_specs_restored))
        self._count("cdi_specs_removed", len(report.cdi_specs_removed))
        log.info(
            "checkpoint %s: %d claims recorded; CDI specs restored: %s; removed: %s",
            self.path,
            len(records),
            report.cdi_specs_restored or "none",
            report.cdi_specs_removed or "none",
        )

    def _reconcile(self, read_claim: ReadClaim, stopping: threading.Event) -> None:
        """The rest of the start: each recorded claim that no longer exists handed to the
        driver's unprepare, once."""
        report = self._report
        try:
            if self._files_pending:
                # Another instance held the lock at start (a rolling update): it was serving
                # kubelet, so no claim went away unseen; the first call reads the file.
                report.deferred = True
            elif self._file.unusable is None:
                self._unprepare_gone(read_claim, stopping, report)
        except Exception as exc:
            self._error_handler(exc, "reconciling the checkpoint with the cluster failed")
        finally:
            self.reconciliation = report
            self._reconciled.set()

    def _unprepare_gone(
        self, read_claim: ReadClaim, stopping: threading.Event, report: Reconciliation
    ) -> None:
        gone = gone_claims(list(self._file.state.records.values()), read_claim, stopping, report)
        self._count("claims_unchecked", len(report.unchecked))
        for uid, error in report.unchecked.items():
            log.warning("claim %s of the checkpoint not checked: %s", uid, error)
        if not gone or stopping.is_set():
            return
        with self._serializer.hold():
            self._refresh()
            refs = [
                ClaimRef(r.namespace, r.name, r.uid)
                for r in gone
                if r.uid in self._file.state.records
            ]
            results = self._unprepare(refs, None) if refs else {}
        for ref in refs:
            outcome = results[ref.uid]
            if outcome is None or not error_text(outcome):
                report.unprepared.append(ref)
                log.info("claim %s/%s (%s) no longer exists: unprepared", *_ref(ref))
            else:
                report.unprepare_failed[ref.uid] = error_text(outcome)
                self._error_handler(
                    RuntimeError(error_text(outcome)),
                    f"claim {ref.namespace}/{ref.name} ({ref.uid}) no longer exists, and "
                    "unpreparing it failed (the record is kept for the next start)",
                )
        self._count("claims_unprepared", len(report.unprepared))
        self._count("claims_unprepare_failed", len(report.unprepare_failed))


def _ref(ref: ClaimRef) -> tuple[str, str, str]:
    return (ref.namespace, ref.name, ref.uid)


__all__ = ["Checkpoint", "CheckpointStats"]
