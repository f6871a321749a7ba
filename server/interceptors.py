"""Cross-cutting concerns as small gRPC server interceptors: auth, metrics, access log."""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable

import grpc

from envad.errors import Unauthenticated
from envad.server.errors import status_for

OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
Observer = Callable[[str, str, float], None]   # (method, status code name, seconds)


def _code_name(context) -> str:
    code = context.code()
    if code is None:
        return "OK"
    return code.name if isinstance(code, grpc.StatusCode) else str(code)


def _observed(behavior, streams_out: bool, method: str, observe: Observer):
    """Wrap a handler behaviour so `observe` sees its method, status and duration."""
    if streams_out:
        def stream_behavior(request, context):
            start = time.perf_counter()
            try:
                yield from behavior(request, context)
            finally:
                observe(method, _code_name(context), time.perf_counter() - start)
        return stream_behavior

    def unary_behavior(request, context):
        start = time.perf_counter()
        try:
            return behavior(request, context)
        finally:
            observe(method, _code_name(context), time.perf_counter() - start)
    return unary_behavior


def _rebuild(handler: grpc.RpcMethodHandler, wrap) -> grpc.RpcMethodHandler:
    kinds = (
        ("unary_unary", grpc.unary_unary_rpc_method_handler, False),
        ("unary_stream", grpc.unary_stream_rpc_method_handler, True),
        ("stream_unary", grpc.stream_unary_rpc_method_handler, False),
        ("stream_stream", grpc.stream_stream_rpc_method_handler, True),
    )
    for attr, factory, streams_out in kinds:
        behavior = getattr(handler, attr)
        if behavior is not None:
            return factory(wrap(behavior, streams_out),
                           request_deserializer=handler.request_deserializer,
                           response_serializer=handler.response_serializer)
    return handler


class ObserveInterceptor(grpc.ServerInterceptor):
    """Reports every RPC's method, final status and duration to an observer."""

    def __init__(self, observe: Observer):
        self._observe = observe

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method.rsplit("/", 1)[-1]
        return _rebuild(handler, lambda b, s: _observed(b, s, method, self._observe))


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Requires `authorization: Bearer <token>` on every RPC except health and reflection."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if method.startswith(OPEN_SERVICES):
            return continuation(handler_call_details)
        given = dict(handler_call_details.invocation_metadata or ()).get("authorization", "")
        if hmac.compare_digest(given.encode(), self._expected):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None

        def deny(behavior, streams_out):
            def reject(request, context):
                error = Unauthenticated("missing or wrong bearer token (metadata "
                                        "'authorization')")
                context.abort(status_for(error), str(error))
            return reject
        return _rebuild(handler, deny)


def metrics_observer(metrics) -> Observer:
    def observe(method: str, code: str, seconds: float) -> None:
        metrics.requests.labels(method, code).inc()
        metrics.latency.labels(method).observe(seconds)
    return observe


def log_observer(logger: logging.Logger) -> Observer:
    def observe(method: str, code: str, seconds: float) -> None:
        logger.info("rpc", extra={"rpc": method, "code": code, "ms": round(seconds * 1000, 2)})
    return observe
