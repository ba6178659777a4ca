"""The DRA gRPC service kubelet calls to prepare and unprepare claims, in each version."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from resourceslice._errortext import describe_error
from resourceslice.kubeletplugin._pb import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)
from resourceslice.kubeletplugin.types import ClaimRef, PrepareResult


class ClaimCalls(Protocol):
    """What the service asks of the helper."""

    def prepare(
        self, refs: Sequence[ClaimRef], deadline: float | None = None
    ) -> dict[str, PrepareResult]: ...

    def unprepare(
        self, refs: Sequence[ClaimRef], deadline: float | None = None
    ) -> dict[str, str]: ...


def deadline_of(context: Any) -> float | None:
    """kubelet's deadline of a call, on ``time.monotonic()``; None when it set none."""
    left: float | None = context.time_remaining()
    # grpc documents None for a call without a deadline, but its server answers the time to
    # its infinite future (~9.2e18 s), which no wait takes (Lock.acquire: OverflowError). A
    # deadline further off than the longest wait a thread can take is none.
    if left is None or left > threading.TIMEOUT_MAX:
        return None
    return time.monotonic() + left


def error_text(error: str | BaseException) -> str:
    """What kubelet gets for a failed claim, and puts into the pod's events: one line."""
    return describe_error(error) if isinstance(error, BaseException) else error


def base_request(name: str) -> str:
    """A subrequest reference (``request/subrequest``) as its request: kubelet matches devices
    to a container's requests by the request's name."""
    return name.split("/", 1)[0]


def refs(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


class DRAService:
    """The DRA service in each protocol version, all over the same calls of the helper.

    The versions' messages have the same fields, but for v1's ``share_id``.
    """

    def __init__(self, helper: ClaimCalls) -> None:
        self._helper = helper

    def _prepare_response(self, pb: Any, request: Any, context: Any) -> Any:
        response = pb.NodePrepareResourcesResponse()
        results = self._helper.prepare(refs(request.claims), deadline_of(context))
        for uid, result in results.items():
            entry = response.claims[uid]
            # An empty error text means success, as in unprepare and on the wire.
            if result.error is not None and error_text(result.error):
                entry.error = error_text(result.error)
                continue
            for device in result.devices:
                fields: dict[str, Any] = {
                    "request_names": [base_request(r) for r in device.requests],
                    "pool_name": device.pool_name,
                    "device_name": device.device_name,
                    "cdi_device_ids": list(device.cdi_device_ids),
                }
                if device.share_id is not None and pb is dra_v1_pb2:
                    fields["share_id"] = device.share_id
                entry.devices.append(pb.Device(**fields))
        return response

    def _unprepare_response(self, pb: Any, request: Any, context: Any) -> Any:
        response = pb.NodeUnprepareResourcesResponse()
        results = self._helper.unprepare(refs(request.claims), deadline_of(context))
        for uid, error in results.items():
            response.claims[uid].error = error
        return response

    def v1(self) -> dra_v1_pb2_grpc.DRAPluginServicer:
        service = self

        class V1(dra_v1_pb2_grpc.DRAPluginServicer):
            def NodePrepareResources(self, request: Any, context: Any) -> Any:
                return service._prepare_response(dra_v1_pb2, request, context)

            def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
                return service._unprepare_response(dra_v1_pb2, request, context)

        return V1()

    def v1beta1(self) -> dra_v1beta1_pb2_grpc.DRAPluginServicer:
        service = self

        class V1Beta1(dra_v1beta1_pb2_grpc.DRAPluginServicer):
            def NodePrepareResources(self, request: Any, context: Any) -> Any:
                return service._prepare_response(dra_v1beta1_pb2, request, context)

            def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
                return service._unprepare_response(dra_v1beta1_pb2, request, context)

        return V1Beta1()
