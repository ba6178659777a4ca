"""List + watch of every ResourceClaim (``resource.k8s.io/v1``), as client-go's reflector.

Claims cannot be selected by driver on the server (no field selector names their devices'
drivers), so every claim comes through and the caller keeps those it wants. Lists come in
pages; the watch resumes from its last event (bookmarks keep that recent), relists on 410
Gone or an error inside the stream, and reconnects with the informer's backoff. Used by
:mod:`resourceslice.binding`; the slice informer decodes in the core instead, for its size.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from resourceslice._http import REQUEST_TIMEOUT, release, request, retry_after, stream_lines
from resourceslice.connection import ApiError
from resourceslice.informer import _SHORT_WATCH, _WATCH_SECONDS, Backoff, _abort

if TYPE_CHECKING:
    from resourceslice.connection import Client

log = logging.getLogger(__name__)

CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
#: Claims per page of a list: a cluster's claims are never held twice as text.
_PAGE = 500

Claim = dict[str, Any]


class _Relist(Exception):
    """The watch cannot go on from its resourceVersion (410, or an ERROR event)."""


class ClaimWatch:
    """Follows every claim of the cluster in a thread of its own.

    ``replaced(claims)``: a list's whole result (the view starts over: what is not in it is
    gone). ``changed(claim)``: one added or modified. ``deleted(claim)``: one gone, as last
    seen. ``on_error(exc, what)``: a failed list or watch (then retried with backoff). The
    handlers run on the watch's thread, one at a time.
    """

    def __init__(
        self,
        api_client: Client,
        *,
        replaced: Callable[[list[Claim]], None],
        changed: Callable[[Claim], None],
        deleted: Callable[[Claim], None],
        on_error: Callable[[BaseException, str], None],
        backoff: Backoff | None = None,
    ) -> None:
        self._client = api_client
        self._replaced = replaced
        self._changed = changed
        self._deleted = deleted
        self._on_error = on_error
        self._backoff = backoff or Backoff()
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._response_lock = threading.Lock()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name="resourceslice-claims", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        with self._response_lock:
            response = self._response
        if response is not None:
            _abort(response)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Whether the first list has been handed over (waiting up to ``timeout``)."""
        return self._synced.wait(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        version: str | None = None
        while not self._stopping.is_set():
            worked = False
            asked = 0.0
            try:
                if version is None:
                    version = self._list()
                    self._synced.set()
                version, worked = self._watch(version)
                if worked:
                    self._backoff.reset()
                    continue
                if self._stopping.is_set():
                    break
                log.warning("the ResourceClaim watch ended at once without events; backing off")
            except _Relist as exc:
                log.info("the ResourceClaim watch cannot resume (%s): relisting", exc)
                version = None
                self._backoff.reset()
                continue
            except ApiError as exc:
                if self._stopping.is_set():
                    break
                if exc.status == 410:
                    version = None
                    continue
                asked = retry_after(exc)
                self._on_error(exc, "listing/watching ResourceClaims")
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # the network, a response that is not JSON
                if self._stopping.is_set():
                    break
                if isinstance(exc, ValueError):
                    version = None  # not resumed from what could not be read
                self._on_error(exc, "watching ResourceClaims")
            self._stopping.wait(max(self._backoff.next_delay(), asked))

    def _list(self) -> str:
        claims: list[Claim] = []
        query: list[tuple[str, str]] = [("limit", str(_PAGE))]
        while True:
            response = request(self._client, "GET", CLAIMS_PATH, query=query)
            page = json.loads(response.data)
            claims += page.get("items") or []
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                break
            query = [("limit", str(_PAGE)), ("continue", meta["continue"])]
        self._replaced(claims)
        return str(meta.get("resourceVersion") or "")

    def _watch(self, version: str) -> tuple[str, bool]:
        """One watch stream; where it got to, and whether it worked (an event, or it lasted)."""
        started = time.monotonic()
        seconds = random.randint(_WATCH_SECONDS, 2 * _WATCH_SECONDS)
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", version),
            ("timeoutSeconds", str(seconds)),
        ]
        response = request(
            self._client,
            "GET",
            CLAIMS_PATH,
            query=query,
            stream=True,
            timeout=(REQUEST_TIMEOUT[0], seconds + 30.0),
        )
        with self._response_lock:
            self._response = response
        worked = False
        try:
            if self._stopping.is_set():
                return version, False
            for line in stream_lines(response):
                version = self._apply(json.loads(line), version)
                worked = True
        finally:
            with self._response_lock:
                self._response = None
            release(response)
        return version, worked or time.monotonic() - started >= _SHORT_WATCH

    def _apply(self, event: dict[str, Any], version: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            raise _Relist(f"{obj.get('code')} {obj.get('message', '')}")
        found = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind == "DELETED":
            self._deleted(obj)
        elif kind in ("ADDED", "MODIFIED"):
            self._changed(obj)
        return found
