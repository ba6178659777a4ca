"""The ``coordination.k8s.io/v1`` Lease API, as client-go's ``resourcelock/leaselock.go``.

Every Lease request of the package is made here: where a Lease lives (:func:`lease_path`),
the spec it holds and its ``MicroTime`` stamps, the get, create and update of one Lease
(:class:`LeaseLock`) and the list of a group's (:func:`list_leases`). What a Lease means
(who may take it, when it expired, when to let it go) is the business of the elector
(:mod:`resourceslice.leaderelection`) and of the sharding round (:mod:`resourceslice.sharding`);
this module only talks to the API, so that both talk to it the same way.

Every request is sent once and is over by the deadline its caller gives (see
:func:`resourceslice._http.request`): a hung request must not keep a standby from trying
again, nor a leader from stopping within a pod's grace period.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from resourceslice._http import REQUEST_TIMEOUT, request
from resourceslice.api import RequestDeadlineError
from resourceslice.connection import ApiError

if TYPE_CHECKING:
    from resourceslice.connection import Client
    from resourceslice.workqueue import Clock

API_VERSION = "coordination.k8s.io/v1"


def leases_path(namespace: str) -> str:
    """The collection of the Leases of ``namespace``."""
    return f"/apis/{API_VERSION}/namespaces/{quote(namespace, safe='')}/leases"


def lease_path(namespace: str, name: str) -> str:
    """The Lease ``namespace/name``."""
    return f"{leases_path(namespace)}/{quote(name, safe='')}"


def micro_time() -> str:
    """Now as a ``MicroTime``: informational only, nobody's expiry depends on it."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(
    holder: str, duration: int, acquired: str, renewed: str, transitions: int
) -> dict[str, Any]:
    """A Lease spec (client-go's ``LeaderElectionRecordToLeaseSpec``)."""
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "acquireTime": acquired,
        "renewTime": renewed,
        "leaseTransitions": transitions,
    }


class LeaseLock:
    """The Lease ``namespace/name``: read, created, and updated under optimistic concurrency.

    ``labels``: set on the Lease when created, and over its own on every update. Deadlines
    are times of ``clock``, the caller's.
    """

    def __init__(
        self,
        api_client: Client,
        namespace: str,
        name: str,
        *,
        clock: Clock,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        #: ``namespace/name``, as errors and logs name the Lease.
        self.describe = f"{namespace}/{name}"
        self._client = api_client
        self._clock = clock
        self._labels = labels
        self._collection = leases_path(namespace)
        self._path = lease_path(namespace, name)

    def get(self, deadline: float) -> dict[str, Any] | None:
        """The Lease as it is now; None if there is none."""
        try:
            response = self._request("GET", self._path, deadline)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        lease: dict[str, Any] = json.loads(response.data)
        return lease

    def create(self, spec: dict[str, Any], deadline: float) -> dict[str, Any]:
        """Create the Lease holding ``spec``: ApiError 409 if someone created it first."""
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self._labels:
            metadata["labels"] = self._labels
        body = {"apiVersion": API_VERSION, "kind": "Lease", "metadata": metadata, "spec": spec}
        return self._send("POST", self._collection, body, deadline)

    def update(
        self, lease: dict[str, Any], spec: dict[str, Any], deadline: float
    ) -> dict[str, Any]:
        """Write ``spec`` over ``lease`` as read: ApiError 409 if anyone wrote it since."""
        # The whole object as read, resourceVersion included: the update fails with 409 if
        # anyone wrote the Lease since. Our labels replace theirs: a shard's Lease taken
        # under another number of shards says so.
        if self._labels:
            metadata = lease.get("metadata") or {}
            labels = {**(metadata.get("labels") or {}), **self._labels}
            lease = {**lease, "metadata": {**metadata, "labels": labels}}
        return self._send("PUT", self._path, {**lease, "spec": spec}, deadline)

    def _send(
        self, method: str, path: str, body: dict[str, Any], deadline: float
    ) -> dict[str, Any]:
        response = self._request(method, path, deadline, json.dumps(body).encode())
        lease: dict[str, Any] = json.loads(response.data)
        return lease

    def _request(self, method: str, path: str, deadline: float, body: bytes | None = None) -> Any:
        """One Lease request, over by ``deadline`` (our clock), sent once."""
        left = deadline - self._clock.now()
        if left <= 0:
            raise RequestDeadlineError(
                f"{method} lease {self.describe}: past the attempt's deadline"
            )
        timeout = (min(REQUEST_TIMEOUT[0], left), min(REQUEST_TIMEOUT[1], left))
        return request(self._client, method, path, body=body, timeout=timeout, total=left)


def list_leases(
    api_client: Client, namespace: str, label_selector: str, seconds: float
) -> list[dict[str, Any]]:
    """The Leases of ``namespace`` that ``label_selector`` selects, listed within ``seconds``."""
    response = request(
        api_client,
        "GET",
        leases_path(namespace),
        query=[("labelSelector", label_selector)],
        timeout=(min(REQUEST_TIMEOUT[0], seconds), seconds),
        total=seconds,
    )
    items: list[dict[str, Any]] = json.loads(response.data).get("items") or []
    return items
