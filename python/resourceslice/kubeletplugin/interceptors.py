"""gRPC interceptors on the plugin's services: what Go's helper takes as ``GRPCInterceptor``
and ``GRPCStreamInterceptor``.

An interceptor sees each call kubelet makes — ``GetInfo`` and ``NotifyRegistrationStatus``
on the registration socket, ``NodePrepareResources``, ``NodeUnprepareResources`` and the
health stream on the DRA socket — before the helper does, to log, count, time, check or
fail it. ``kubeletplugin.start(interceptors=[...], stream_interceptors=[...])`` takes:

- a function ``f(request, context, method, handler)`` that returns the response, mostly
  ``handler(request, context)``; ``method`` is the call's full name
  (``/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources``). In ``interceptors``
  it sees the unary calls (all but the health stream), as Go's ``GRPCInterceptor``; in
  ``stream_interceptors`` the streaming ones, whose ``handler`` returns the responses'
  iterator, and so must ``f`` (Go's ``GRPCStreamInterceptor``). It fails a call as a
  servicer does: ``context.abort(code, details)``; any other exception is ``UNKNOWN``.
- in ``interceptors``, a ``grpc.ServerInterceptor``: grpc's own kind, given every call.

Both sockets get them all, in the order given, the first outermost (as Go chains them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Union

import grpc

#: The rest of the chain, down to the servicer: ``handler(request, context)``.
Handler = Callable[[Any, grpc.ServicerContext], Any]
#: ``f(request, context, method, handler)``: the response (an iterator for a stream).
InterceptorFunction = Callable[[Any, grpc.ServicerContext, str, Handler], Any]
#: What ``start(interceptors=...)`` takes.
Interceptor = Union[grpc.ServerInterceptor, InterceptorFunction]


class _FunctionInterceptor(grpc.ServerInterceptor):
    """A function interceptor over grpc's interface, for the calls of one kind."""

    def __init__(self, function: InterceptorFunction, *, streaming: bool) -> None:
        self._function = function
        self._streaming = streaming

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None:  # no such method: grpc answers UNIMPLEMENTED
            return None
        if (handler.request_streaming or handler.response_streaming) != self._streaming:
            return handler
        function = self._function
        method = handler_call_details.method
        make: Any
        if handler.request_streaming and handler.response_streaming:
            inner, make = handler.stream_stream, grpc.stream_stream_rpc_method_handler
        elif handler.request_streaming:
            inner, make = handler.stream_unary, grpc.stream_unary_rpc_method_handler
        elif handler.response_streaming:
            inner, make = handler.unary_stream, grpc.unary_stream_rpc_method_handler
        else:
            inner, make = handler.unary_unary, grpc.unary_unary_rpc_method_handler
        assert inner is not None

        def behaviour(request: Any, context: grpc.ServicerContext) -> Any:
            return function(request, context, method, inner)

        wrapped: grpc.RpcMethodHandler[Any, Any] = make(
            behaviour, handler.request_deserializer, handler.response_serializer
        )
        return wrapped


def server_interceptors(
    interceptors: Iterable[Interceptor], stream_interceptors: Iterable[InterceptorFunction]
) -> list[grpc.ServerInterceptor]:
    """What ``grpc.server(interceptors=...)`` takes, in the order given (functions for unary
    calls from ``interceptors``, for streams from ``stream_interceptors``)."""
    chain: list[grpc.ServerInterceptor] = []
    for interceptor in interceptors:
        if isinstance(interceptor, grpc.ServerInterceptor):
            chain.append(interceptor)
        elif callable(interceptor):
            chain.append(_FunctionInterceptor(interceptor, streaming=False))
        else:
            raise TypeError(
                f"an interceptor is a grpc.ServerInterceptor or a function, not {interceptor!r}"
            )
    for function in stream_interceptors:
        if isinstance(function, grpc.ServerInterceptor) or not callable(function):
            raise TypeError(
                "stream_interceptors takes functions f(request, context, method, handler); "
                f"give a grpc.ServerInterceptor to interceptors: {function!r}"
            )
        chain.append(_FunctionInterceptor(function, streaming=True))
    return chain


__all__ = [
    "Handler",
    "Interceptor",
    "InterceptorFunction",
    "server_interceptors",
]
