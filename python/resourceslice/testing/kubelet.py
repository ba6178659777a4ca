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

import contextlib
import itertools
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from resourceslice.testing.cluster import ClusterError, build_go_binary

_PACKAGE_DIR = Path(__file__).resolve().parent

Event = dict[str, Any]


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


class KubeletHarness:
    """One harness process: events (registrations, health reports) are collected as they
    come; calls wait for their answer."""

    def __init__(self, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self._process = process
        self._log = log
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._events: list[Event] = []
        self._answers: dict[int, Event] = {}
        self._reader = threading.Thread(target=self._read, name="kubelet-harness", daemon=True)
        self._reader.start()

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
        log = open(log_file, "ab")  # noqa: SIM115 - lives as long as the process
        process = subprocess.Popen(
            [str(binary), "--registry-dir", str(registry_dir), "-v=4"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        harness = cls(process, log)
        try:
            harness.wait_event(lambda e: e.get("event") == "ready", timeout=30)
        except BaseException:
            harness.close()
            raise
        return harness

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            message: Event = json.loads(line)
            with self._cond:
                if "id" in message:
                    self._answers[message["id"]] = message
                else:
                    self._events.append(message)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _wait(self, found: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = found()
                if result:
                    return result
                if self._process.poll() is not None:
                    raise AssertionError(
                        f"the kubelet harness exited ({self._process.returncode}) while "
                        f"waiting for {what}; events: {self._events}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no {what} within {timeout}s; events: {self._events}")
                self._cond.wait(remaining)

    def events(self, kind: str | None = None) -> list[Event]:
        """The events so far (``register``, ``deregister``, ``health``), oldest first."""
        with self._cond:
            return [e for e in self._events if kind is None or e.get("event") == kind]

    def wait_event(self, match: Callable[[Event], bool], timeout: float = 60.0) -> Event:
        """The first event (of all so far) that ``match`` accepts; waits for it to come."""

        def found() -> Event | None:
            return next((e for e in self._events if match(e)), None)

        result: Event = self._wait(found, timeout, "matching event")
        return result

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

        def found() -> Event | None:
            return next((e for e in self._events[after:] if match(e)), None)

        result: Event = self._wait(found, timeout, f"registration of {driver}")
        return result

    def _call(
        self, op: str, driver: str, claims: Iterable[Mapping[str, Any]], timeout: float
    ) -> Event:
        number = next(self._ids)
        command = {
            "id": number,
            "op": op,
            "driver": driver,
            "claims": [_claim_ref(c) for c in claims],
        }
        assert self._process.stdin is not None
        with self._cond:
            self._process.stdin.write(json.dumps(command).encode() + b"\n")
            self._process.stdin.flush()
        answer: Event = self._wait(lambda: self._answers.pop(number, None), timeout, f"{op} answer")
        return answer

    def prepare(
        self, driver: str, claims: Iterable[Mapping[str, Any]], *, timeout: float = 60.0
    ) -> Event:
        """kubelet's NodePrepareResources of ``claims`` (ResourceClaim dicts, or refs):
        ``{"claims": {uid: {"error", "devices": [...]}}}``, or ``{"error": ...}`` when the
        call itself failed (driver not registered, gRPC error)."""
        return self._call("prepare", driver, claims, timeout)

    def unprepare(
        self, driver: str, claims: Iterable[Mapping[str, Any]], *, timeout: float = 60.0
    ) -> Event:
        """kubelet's NodeUnprepareResources: ``{"claims": {uid: {"error"}}}`` or ``{"error"}``."""
        return self._call("unprepare", driver, claims, timeout)

    def close(self) -> None:
        """End the process (stdin closed, then a kill if it does not exit)."""
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(10)
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._log.close()

    def __enter__(self) -> KubeletHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
