"""List + watch of one driver's ResourceSlices into a :class:`SliceStore`.

The same job as client-go's reflector: list, then watch from the list's resourceVersion
(with bookmarks, so a reconnect resumes from a recent version instead of relisting), relist
on 410 Gone, reconnect with backoff when the stream drops. Responses are read as raw bytes
and decoded by the core; no ``kubernetes`` model objects are built.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional, Protocol

from resourceslice._http import REQUEST_TIMEOUT, SliceLister, release, retry_after, stream_lines
from resourceslice.connection import ApiError
from resourceslice.store import SliceStore

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from resourceslice import _core as core
    from resourceslice._core import SliceRecord
    from resourceslice._http import ListOptions
    from resourceslice.connection import Client
else:
    from resourceslice._backend import core

log = logging.getLogger(__name__)

#: Called for every change the store sees: ``(old, new)``, None on the missing side; for a
#: watched delete, ``old`` is the object as the delete event showed it.
ChangeHandler = Callable[[Optional["SliceRecord"], Optional["SliceRecord"]], None]
#: ``(exception, what was being done)``.
ErrorHandler = Callable[[BaseException, str], None]

_WATCH_SECONDS = 300  # the server ends each watch after about this long; we then resume
#: A watch that ended sooner than this without one event did not work (client-go's "very
#: short watch"): resuming at once would spin on a server or proxy that closes every watch.
_SHORT_WATCH = 1.0


class ListApi(Protocol):
    """What the informer calls: :class:`SliceLister`'s signature (its keywords:
    :class:`~resourceslice._http.ListOptions`).

    The seam for another API version, or for a test's scripted responses.
    """

    def list_resource_slice(self, **options: Unpack[ListOptions]) -> Any: ...


class Backoff:
    """Delays between failed list/watch attempts, as client-go's reflector spaces them.

    The n-th delay in a row is ``initial * 2**n`` capped at ``cap``, times a random factor
    in [1, 2): from 0.8 s up to [30, 60) s, about 0.02 requests a second against a server
    that fails every time. Jitter keeps many informers from retrying in step. :meth:`reset`
    after an attempt that worked.
    """

    def __init__(self, initial: float = 0.8, cap: float = 30.0) -> None:
        self._initial = initial
        self._cap = cap
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        return delay * random.uniform(1.0, 2.0)

    def reset(self) -> None:
        self._next = self._initial


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): only a new list can continue."""


class _StreamError(ApiError):
    """An ERROR event other than 410 inside a watch stream.

    The server could not go on from that resourceVersion (e.g. 500 "PrevKv=nil" when a
    watch resumes right at an etcd compaction), so resuming from it would fail again
    forever: like client-go's reflector, start over with a list.
    """


def field_selector(driver: str, node_name: str | None, all_pools_of_driver: bool) -> str:
    """``spec.driver=<driver>`` plus the node filter.

    ``node_name`` None selects slices without a node (``spec.nodeName=``), which is what a
    controller without a Node owner publishes. ``all_pools_of_driver`` (reconcile one pool by
    name) drops the node filter: such a pool may be published from any node.
    """
    selector = f"spec.driver={driver}"
    if all_pools_of_driver:
        return selector
    return f"{selector},spec.nodeName={node_name or ''}"


class SliceInformer:
    def __init__(
        self,
        api_client: Client,
        *,
        driver: str,
        selector: str,
        store: SliceStore,
        on_change: ChangeHandler,
        on_error: ErrorHandler,
        only_pool: str | None = None,
        api: ListApi | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        """``api``: lists and watches instead of ``SliceLister(api_client)``."""
        self._api: ListApi = api if api is not None else SliceLister(api_client)
        self._backoff = backoff or Backoff()
        self._driver = driver
        self._selector = selector
        self._store = store
        self._on_change = on_change
        self._on_error = on_error
        self._only_pool = only_pool
        self._stopping = threading.Event()
        # Ends a wait between attempts early: set by stop() and by retry_now().
        self._wake = threading.Event()
        self._synced = threading.Event()
        # Whether the last list or watch request was answered (see ``connected``).
        self._connected = False
        self._response_lock = threading.Lock()
        self._response: Any = None
        # Where the watch resumes; None: list first. Used by the informer thread only.
        self._version: str | None = None
        # Whether the current watch worked (an event came, or it lasted): set by _watch.
        self._watch_worked = False
        self._thread = threading.Thread(
            target=self._run, name="resourceslice-informer", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End the watch now: the open response is shut down under the reading thread."""
        self._stopping.set()
        self._wake.set()
        with self._response_lock:
            response = self._response
        if response is not None:
            _abort(response)
        # From the informer's own thread (an error or change handler that stops the
        # controller), the loop ends when the handler returns.
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def retry_now(self) -> None:
        """The server answered another request: if waiting to reconnect, reconnect now.

        After an outage the backoff has grown to seconds, and until the informer relists, the
        controller plans from a store that misses what was written just before the outage. A
        write that got an answer shows the server is back. (A Retry-After is still waited.)
        """
        self._wake.set()

    def interrupt_watch(self) -> bool:
        """End the open watch as a dropped connection would; whether one was open.

        The informer reconnects from where the watch got to. For tests of the reconnect.
        """
        with self._response_lock:
            response = self._response
        if response is None:
            return False
        _abort(response)
        return True

    @property
    def alive(self) -> bool:
        """Whether the informer's thread is running (until stop() has ended it)."""
        return self._thread.is_alive()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Whether the first list has reached the store (waiting up to ``timeout``)."""
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def connected(self) -> bool:
        """Whether the last list or watch request was answered; False from a failure (an
        error status, a dropped connection) until the next one is."""
        return self._connected

    # -- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()  # an answer seen from now on cuts the next wait short
            asked = 0.0  # Retry-After of an overloaded server
            self._watch_worked = False
            try:
                if self._version is None:
                    self._version = self._list()
                    self._synced.set()
                self._watch(self._version)
                if self._watch_worked:
                    self._backoff.reset()
                    continue  # the server ended the watch: resume at once
                if self._stopping.is_set():
                    break
                log.warning("the ResourceSlice watch ended at once without events; backing off")
            except _Gone:
                log.info("the ResourceSlice watch expired (410 Gone): relisting")
                self._version = None
                if self._watch_worked:
                    self._backoff.reset()
                    continue  # a list picks up what the watch can no longer deliver
            except ApiError as exc:
                self._connected = False
                if self._stopping.is_set():
                    break
                if exc.status == 410 or isinstance(exc, _StreamError):
                    self._version = None
                if exc.status != 410:  # 410 at the watch's start: relisting is the cure
                    asked = retry_after(exc)
                    self._on_error(exc, "listing/watching ResourceSlices")
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                # Network errors of any kind: reconnect. ValueError, and PyO3's PanicException
                # (a BaseException: a bug in the Rust core) from decoding: a response the core
                # cannot read is not resumed from, a fresh list starts over. Either way the
                # thread lives on and says what happened.
                self._connected = False
                if self._stopping.is_set():
                    break
                decoding = not isinstance(exc, Exception) or isinstance(exc, ValueError)
                if decoding:
                    self._version = None
                self._on_error(
                    exc, "decoding ResourceSlices" if decoding else "watching ResourceSlices"
                )
            if self._watch_worked:
                self._backoff.reset()
            delay = self._backoff.next_delay()
            if asked > 0:
                log.info("the apiserver asked for %.1fs of quiet (429): the watch pauses", asked)
                delay = max(delay, asked)
            log.info(
                "%s ResourceSlices in %.1fs",
                "watching" if self._version is not None else "relisting",
                delay,
            )
            if asked > 0:
                self._stopping.wait(delay)
            else:
                self._wake.wait(delay)

    def _list(self) -> str:
        response: Any = self._api.list_resource_slice(
            field_selector=self._selector, timeout=REQUEST_TIMEOUT
        )
        self._connected = True
        try:
            # Decoded as it arrives: the whole response and its records are never held at once.
            resource_version, records = core.decode_list_chunks(response.stream(1 << 16))
        finally:
            release(response)
        wanted = [r for r in records if self._wanted(r)]
        log.info("listed %d ResourceSlices (%s)", len(wanted), self._selector)
        for old, new in self._store.replace(wanted):
            self._notify(old, new)
        return resource_version

    def _watch(self, resource_version: str) -> None:
        """Follow one watch stream, noting in ``self._watch_worked`` whether it worked.

        Each event moves ``self._version`` on, so that after a dropped connection the next
        watch resumes where this one stopped, not at its start.
        """
        started = time.monotonic()
        seconds = random.randint(_WATCH_SECONDS, 2 * _WATCH_SECONDS)
        response: Any = self._api.list_resource_slice(
            field_selector=self._selector,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=seconds,
            timeout=(REQUEST_TIMEOUT[0], seconds + 30.0),
        )
        self._connected = True
        with self._response_lock:
            self._response = response
        try:
            if self._stopping.is_set():  # stop() ran before the response was published
                return
            for line in stream_lines(response):
                self._version = self._apply(line, resource_version)
                resource_version = self._version
                self._watch_worked = True
        finally:
            if time.monotonic() - started >= _SHORT_WATCH:
                self._watch_worked = True
            with self._response_lock:
                self._response = None
            release(response)

    def _apply(self, line: bytes, resource_version: str) -> str:
        kind, record, version = core.decode_watch_event(line)
        if kind == "ERROR":
            status = json.loads(version)
            if status.get("code") == 410:
                raise _Gone(status.get("message", ""))
            raise _StreamError(status=status.get("code", 0), reason=status.get("message", ""))
        if kind == "BOOKMARK" or record is None:
            return version or resource_version
        if kind == "DELETED":
            # The event's object is the final state (newest resourceVersion) of the slice.
            if self._store.delete(record.name) is not None:
                self._notify(record, None)
        elif self._wanted(record):
            old = self._store.upsert(record)
            self._notify(old, record)
        else:
            # Moved out of the pool this informer follows: for us, it is gone.
            old = self._store.delete(record.name)
            if old is not None:
                self._notify(old, None)
        return record.resource_version

    def _wanted(self, record: SliceRecord) -> bool:
        # The field selector should have kept other drivers' slices out; checking again
        # means a misbehaving server cannot make us adopt (and then delete) one of them.
        return record.driver == self._driver and (
            self._only_pool is None or record.pool == self._only_pool
        )

    def _notify(self, old: SliceRecord | None, new: SliceRecord | None) -> None:
        try:
            self._on_change(old, new)
        except Exception:
            log.exception("ResourceSlice change handler failed")


def _abort(response: Any) -> None:
    """Interrupt a read blocked on ``response`` from another thread."""
    # Shutting the socket down wakes the blocked recv(); close() alone may not.
    with contextlib.suppress(AttributeError, ValueError, RuntimeError, OSError):
        response.shutdown()
    try:
        response.close()
    except Exception:
        log.debug("closing the watch response failed", exc_info=True)
