"""kubelet's side of a DRA kubelet plugin, from kubelet's own code, for tests.

The harness (``kubeletharness/``, a Go module pinned to the same Kubernetes release as the
test apiserver) runs kubelet's plugin manager on a registration directory — its watcher and
reconciler, which call the plugin's ``GetInfo`` and ``NotifyRegistrationStatus`` — and
kubelet's DRA plugin manager, through whose client kubelet calls ``NodePrepareResources`` /
``NodeUnprepareResources`` and reads the health stream. So a plugin that works with it is
registered and called as a real kubelet of that release does. It is built once per machine
like the test apiserver (Go needed; ``RESOURCESLICE_KUBELET_HARNESS_BIN`` names a prebuilt one)::

    with KubeletHarness.start(registry_dir) as kubelet:
        helper = kubeletplugin.start(plugin, driver=..., registrar_dir=str(registry_dir), ...)
        kubelet.wait_registered(driver)
        answer = kubelet.prepare(driver, [claim])   # claim: a ResourceClaim dict
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from resourceslice.testing._jsonlines import Event, JsonLinesProcess
from resourceslice.testing.cluster import ClusterError, build_go_binary
from resourceslice.testing.polling import wait_until

_PACKAGE_DIR = Path(__file__).resolve().parent


def build_kubelet_harness(*, quiet: bool = False) -> Path:
    """The kubelet harness binary, built once per machine (cached as the test apiserver)."""
    prebuilt = os.environ.get("RESOURCESLICE_KUBELET_HARNESS_BIN")
    if prebuilt:
        if not os.access(prebuilt, os.X_OK):
            raise ClusterError(f"RESOURCESLICE_KUBELET_HARNESS_BIN={prebuilt} is not executable")
        return Path(prebuilt)
    return build_go_binary(
        _PACKAGE_DIR / "kubeletharness",
        binary="kubeletharness",
        cache_name="kubeletharness",
        what="the kubelet harness (kubelet's plugin manager and DRA client)",
        quiet=quiet,
    )


def _claim_ref(claim: Mapping[str, Any]) -> dict[str, str]:
    """What kubelet sends for a claim; a ResourceClaim or a ``{namespace, name, uid}``."""
    meta = claim.get("metadata", claim)
    return {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}


class KubeletHarness(JsonLinesProcess):
    """One harness process: events (registrations, health reports) are collected as they
    come; calls wait for their answer."""

    @classmethod
    def start(
        cls, registry_dir: str | os.PathLike[str], *, log_path: str | os.PathLike[str] | None = None
    ) -> KubeletHarness:
        """Start watching ``registry_dir`` (kubelet's ``plugins_registry``); ready on return.

        kubelet's logs (klog, verbosity 4) go to ``log_path`` (default: the registry
        directory's ``kubelet.log`` beside it).
        """
        binary = build_kubelet_harness()
        log_file = Path(log_path) if log_path else Path(registry_dir).parent / "kubelet.log"
        harness = cls(
            [str(binary), "--registry-dir", str(registry_dir), "-v=4"],
            log_path=log_file,
            what="the kubelet harness",
        )
        try:
            harness.wait_event(lambda e: e.get("event") == "ready", timeout=30)
            # "ready" comes as kubelet's plugin manager starts; its watcher makes the
            # directory in its own goroutine, and a plugin started before then finds none.
            wait_until(lambda: Path(registry_dir).is_dir(), timeout=30)
        except BaseException:
            harness.close()
            raise
        return harness

    def wait_registered(
        self, driver: str, endpoint: str | None = None, *, after: int = 0, timeout: float = 60.0
    ) -> Event:
        """kubelet's successful registration of ``driver`` (at ``endpoint``), among the
        events from index ``after`` on (``len(events())`` taken before a restart)."""

        def match(event: Event) -> bool:
            return (
                event.get("event") == "register"
                and event.get("driver") == driver
                and not event.get("error")
                and (endpoint is None or event.get("endpoint") == endpoint)
            )

        return self.wait_event(match, after=after, timeout=timeout)

    def _claims_call(
        self, op: str, driver: str, claims: Iterable[Mapping[str, Any]], timeout: float
    ) -> Event:
        command = {"op": op, "driver": driver, "claims": [_claim_ref(c) for c in claims]}
        return self.call(command, timeout=timeout)

    def prepare(
        self, driver: str, claims: Iterable[Mapping[str, Any]], *, timeout: float = 60.0
    ) -> Event:
        """kubelet's NodePrepareResources of ``claims`` (ResourceClaim dicts, or refs):
        ``{"claims": {uid: {"error", "devices": [...]}}}``, or ``{"error": ...}`` when the
        call itself failed (driver not registered, gRPC error)."""
        return self._claims_call("prepare", driver, claims, timeout)

    def unprepare(
        self, driver: str, claims: Iterable[Mapping[str, Any]], *, timeout: float = 60.0
    ) -> Event:
        """kubelet's NodeUnprepareResources: ``{"claims": {uid: {"error"}}}`` or ``{"error"}``."""
        return self._claims_call("unprepare", driver, claims, timeout)

    def __enter__(self) -> KubeletHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
