"""Faults of a kubelet plugin on demand, to see what kubelet does with them: registration
that fails, prepare and unprepare that block, fail or take long for chosen claims.

Kubernetes' own e2e test driver has these (``SetGetInfoError``,
``BlockNodePrepareResources``, ``SetNodePrepareResourcesFailureMode``...). Here they are
an interceptor of the plugin's gRPC services, so any plugin gets them unchanged::

    faults = PluginFaults()
    helper = kubeletplugin.start(plugin, ..., interceptors=[faults])

    blocked = faults.block_prepare("my-claim")   # a claim's name, "namespace/name", a
    cluster.create_pod("pod", claim="my-claim")  # ResourceClaim, a ClaimRef, a predicate,
    blocked.wait_hit()                           # or None: every claim
    ...                                          # kubelet waits in NodePrepareResources
    blocked.clear()                              # and now goes on

Each method returns the :class:`Fault` it set: ``clear()`` (or a ``with`` block) ends it,
``hits`` counts the calls it acted on, ``wait_hit()`` waits for one. Faults act before the
helper sees a call: a blocked or delayed call holds none of the helper's locks (other calls
are served meanwhile), and a failed claim never reaches the driver's callback. A blocked or
delayed call ends with ``DEADLINE_EXCEEDED`` when kubelet gives up on it (its deadline: 45 s),
and kubelet retries. Needs the ``kubelet`` extra, as the plugin does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Union

import grpc

from resourceslice.kubeletplugin.interceptors import Handler
from resourceslice.kubeletplugin.service import deadline_of, error_text
from resourceslice.kubeletplugin.types import ClaimRef

#: Which claims a fault is for: a claim's name (any namespace), ``"namespace/name"``, a
#: ResourceClaim (its UID), a :class:`ClaimRef` (its UID), a predicate of the ClaimRef kubelet
#: sends, or None for every claim.
Claims = Union[str, Mapping[str, Any], ClaimRef, Callable[[ClaimRef], bool], None]

GET_INFO = "GetInfo"
NOTIFY_REGISTRATION = "NotifyRegistrationStatus"
PREPARE = "NodePrepareResources"
UNPREPARE = "NodeUnprepareResources"


def _claim_matcher(claims: Claims) -> Callable[[ClaimRef], bool]:
    if claims is None:
        return lambda ref: True
    if isinstance(claims, ClaimRef):
        uid = claims.uid
        return lambda ref: ref.uid == uid
    if isinstance(claims, str):
        namespace, _, name = claims.rpartition("/")
        if namespace:
            return lambda ref: (ref.namespace, ref.name) == (namespace, name)
        return lambda ref: ref.name == name
    if isinstance(claims, Mapping):
        meta = claims.get("metadata", claims)
        uid = meta["uid"]
        return lambda ref: ref.uid == uid
    if callable(claims):
        return claims
    raise TypeError(f"not a claim, nor a predicate of one: {claims!r}")


class Fault:
    """One fault set on :class:`PluginFaults`; acts on each call it matches until cleared."""

    def __init__(
        self,
        faults: PluginFaults,
        method: str,
        kind: str,
        *,
        claims: Claims = None,
        error: str | BaseException | None = None,
        seconds: float = 0.0,
    ) -> None:
        self.method = method
        #: "block", "fail" or "delay".
        self.kind = kind
        self.error = error
        self.seconds = seconds
        self._faults = faults
        self._matches = _claim_matcher(claims)
        self._described = f"{kind} {method}" + ("" if claims is None else f" of {claims!r}")
        self._hits = 0
        self._cleared = False

    def __repr__(self) -> str:
        return f"<Fault {self._described}, {self._hits} hits>"

    @property
    def hits(self) -> int:
        """How many calls it acted on (a call blocked, delayed or failed by it)."""
        with self._faults._cond:
            return self._hits

    @property
    def active(self) -> bool:
        """Not cleared yet."""
        return not self._cleared

    def wait_hit(self, count: int = 1, timeout: float = 60.0) -> None:
        """Wait until it acted on ``count`` calls in all (a blocked call: kubelet waits in it
        now); AssertionError after ``timeout`` seconds."""
        with self._faults._cond:
            if not self._faults._cond.wait_for(lambda: self._hits >= count, timeout):
                raise AssertionError(
                    f"{self._described}: {self._hits} of {count} calls within {timeout}s"
                )

    def clear(self) -> None:
        """End the fault: calls it blocks or delays go on at once, later ones are served."""
        self._faults._remove(self)

    def matches(self, refs: Sequence[ClaimRef]) -> list[ClaimRef]:
        """The claims of a call it is for."""
        return [ref for ref in refs if self._matches(ref)]

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()


class PluginFaults:
    """The faults of one plugin: give it to ``kubeletplugin.start(interceptors=[faults])``.

    It is an interceptor function (see :mod:`resourceslice.kubeletplugin.interceptors`) that
    lets every call through but those a fault set here matches.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._faults: list[Fault] = []

    # -- registration ------------------------------------------------------------------------

    def fail_get_info(self, error: str | BaseException = "simulated GetInfo failure") -> Fault:
        """``GetInfo`` fails with ``error`` (gRPC ``UNKNOWN``, as Go's ``SetGetInfoError``):
        kubelet does not register the plugin, and tries again: 0.5 s later, then twice as
        long after each failure (up to 2 min 2 s)."""
        return self._add(Fault(self, GET_INFO, "fail", error=error))

    def fail_notify_registration(
        self, error: str | BaseException = "simulated NotifyRegistrationStatus failure"
    ) -> Fault:
        """``NotifyRegistrationStatus`` fails with ``error`` before the helper records
        kubelet's answer (Go's ``SetNotifyRegistrationStatusError``): kubelet takes the
        plugin out again at once, and retries (backing off as for ``GetInfo``)."""
        return self._add(Fault(self, NOTIFY_REGISTRATION, "fail", error=error))

    # -- claims ------------------------------------------------------------------------------

    def block_prepare(self, claims: Claims = None) -> Fault:
        """A ``NodePrepareResources`` call naming one of ``claims`` waits until the fault is
        cleared (or kubelet's deadline)."""
        return self._add(Fault(self, PREPARE, "block", claims=claims))

    def fail_prepare(
        self,
        claims: Claims = None,
        error: str | BaseException = "simulated NodePrepareResources failure",
    ) -> Fault:
        """Each of ``claims`` in a ``NodePrepareResources`` call gets ``error`` as its result
        (the driver is called for the call's other claims only)."""
        return self._add(Fault(self, PREPARE, "fail", claims=claims, error=error))

    def delay_prepare(self, claims: Claims = None, *, seconds: float) -> Fault:
        """A ``NodePrepareResources`` call naming one of ``claims`` starts ``seconds`` late."""
        return self._add(Fault(self, PREPARE, "delay", claims=claims, seconds=seconds))

    def block_unprepare(self, claims: Claims = None) -> Fault:
        """As :meth:`block_prepare`, for ``NodeUnprepareResources``."""
        return self._add(Fault(self, UNPREPARE, "block", claims=claims))

    def fail_unprepare(
        self,
        claims: Claims = None,
        error: str | BaseException = "simulated NodeUnprepareResources failure",
    ) -> Fault:
        """As :meth:`fail_prepare`, for ``NodeUnprepareResources``."""
        return self._add(Fault(self, UNPREPARE, "fail", claims=claims, error=error))

    def delay_unprepare(self, claims: Claims = None, *, seconds: float) -> Fault:
        """As :meth:`delay_prepare`, for ``NodeUnprepareResources``."""
        return self._add(Fault(self, UNPREPARE, "delay", claims=claims, seconds=seconds))

    def clear(self) -> None:
        """End every fault."""
        for fault in self.faults():
            fault.clear()

    def faults(self) -> list[Fault]:
        """The faults in force, oldest first."""
        with self._cond:
            return list(self._faults)

    # -- the interceptor ---------------------------------------------------------------------

    def __call__(
        self, request: Any, context: grpc.ServicerContext, method: str, handler: Handler
    ) -> Any:
        name = method.rsplit("/", 1)[-1]
        if name in (GET_INFO, NOTIFY_REGISTRATION):
            failing = self._hit(name, "fail", None)
            if failing:
                context.abort(grpc.StatusCode.UNKNOWN, error_text(_error(failing[-1])))
            return handler(request, context)
        if name not in (PREPARE, UNPREPARE) or not hasattr(request, "claims"):
            return handler(request, context)
        refs = [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in request.claims]
        self._wait(name, refs, context)
        failed: dict[str, str] = {}
        for fault in self._hit(name, "fail", refs):
            for ref in fault.matches(refs):
                failed[ref.uid] = error_text(_error(fault))
        if not failed:
            return handler(request, context)
        # The driver gets the call's other claims; the failed ones get their error.
        narrowed = type(request)()
        narrowed.claims.extend(c for c in request.claims if c.uid not in failed)
        response = handler(narrowed, context)
        for uid, text in failed.items():
            response.claims[uid].error = text
        return response

    def _add(self, fault: Fault) -> Fault:
        with self._cond:
            self._faults.append(fault)
            self._cond.notify_all()
        return fault

    def _remove(self, fault: Fault) -> None:
        with self._cond:
            fault._cleared = True
            if fault in self._faults:
                self._faults.remove(fault)
            self._cond.notify_all()

    def _hit(self, method: str, kind: str, refs: Sequence[ClaimRef] | None) -> list[Fault]:
        """The faults of ``kind`` on ``method`` for this call (``refs``: its claims), each
        counting the call as a hit."""
        with self._cond:
            hit = [
                f
                for f in self._faults
                if f.method == method and f.kind == kind and (refs is None or f.matches(refs))
            ]
            for fault in hit:
                fault._hits += 1
            if hit:
                self._cond.notify_all()
            return hit

    def _wait(self, method: str, refs: Sequence[ClaimRef], context: grpc.ServicerContext) -> None:
        """Hold the call while a block or delay for one of its claims is in force."""
        start = time.monotonic()
        deadline = deadline_of(context)
        ended = threading.Event()

        def call_ended() -> None:
            with self._cond:
                ended.set()
                self._cond.notify_all()

        holding = self._hit(method, "block", refs) + self._hit(method, "delay", refs)
        if not holding:
            return
        if not context.add_callback(call_ended):
            ended.set()  # over already: grpc never calls a callback added after

        def holds() -> Iterator[float | None]:
            """Per fault still holding the call: until when (None: until cleared)."""
            for fault in holding:
                if not fault.active:
                    continue
                if fault.kind == "block":
                    yield None
                elif start + fault.seconds > time.monotonic():
                    yield start + fault.seconds

        with self._cond:
            while True:
                until = list(holds())
                if not until:
                    return
                now = time.monotonic()
                if ended.is_set() or (deadline is not None and now >= deadline):
                    break
                wake = [t for t in until if t is not None]
                if deadline is not None:
                    wake.append(deadline)
                self._cond.wait(min(wake) - now if wake else None)
        context.abort(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"{method} held by PluginFaults until kubelet gave up (its deadline, or cancelled)",
        )


def _error(fault: Fault) -> str | BaseException:
    assert fault.error is not None
    return fault.error


__all__ = ["Claims", "Fault", "PluginFaults"]
