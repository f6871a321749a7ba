"""Cross-cutting concerns as small gRPC server interceptors: auth, metrics, access log,
the refusal of requests that do not parse, and the drain gate of a shutdown."""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterable

import grpc

from envad.errors import InvalidInput, Unauthenticated, Unavailable
from envad.server.errors import status_for
from envad.server.limits import clip_message

OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
Observer = Callable[[str, str, float], None]   # (method, status code name, seconds)


def _code_name(context) -> str:
    code = context.code()
    if code is None:
        return "OK"
    return code.name if isinstance(code, grpc.StatusCode) else str(code)


def _observed(behavior, streams_in: bool, streams_out: bool, method: str,
              observe: Observer):
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


_KINDS = (   # (attribute, factory, streams in, streams out)
    ("unary_unary", grpc.unary_unary_rpc_method_handler, False, False),
    ("unary_stream", grpc.unary_stream_rpc_method_handler, False, True),
    ("stream_unary", grpc.stream_unary_rpc_method_handler, True, False),
    ("stream_stream", grpc.stream_stream_rpc_method_handler, True, True),
)


def _rebuild(handler: grpc.RpcMethodHandler, wrap,
             deserializer: Callable | None = None) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour wrapped (`wrap(behavior, streams_in, streams_out)`)
    and, when given, `deserializer(handler's deserializer)` parsing its requests."""
    for attr, factory, streams_in, streams_out in _KINDS:
        behavior = getattr(handler, attr)
        if behavior is not None:
            parse = handler.request_deserializer
            return factory(wrap(behavior, streams_in, streams_out),
                           request_deserializer=deserializer(parse) if deserializer else parse,
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
        return _rebuild(handler, lambda b, i, o: _observed(b, i, o, method, self._observe))


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
        # an unauthenticated request is refused before its body is received
        return refused_unread(handler, Unauthenticated(
            "missing or wrong bearer token (metadata 'authorization')"))


def refused_unread(handler: grpc.RpcMethodHandler, error: Exception
                    ) -> grpc.RpcMethodHandler:
    """A handler answering every call to `handler`'s method with `error` before any of
    its request bytes are received.

    gRPC's server receives a single request whole (up to max_message_mb) before calling a
    unary behaviour, even one that only aborts; a request-streaming behaviour is handed
    an iterator that receives nothing until iterated. So the refusal streams requests
    whatever the method declares, and never iterates them: the client sees `error`'s
    status, and only what HTTP/2 flow control admits before it reaches the server.
    """
    def refuse(requests, context):
        context.abort(status_for(error), str(error))

    factory = (grpc.stream_stream_rpc_method_handler if handler.response_streaming
               else grpc.stream_unary_rpc_method_handler)
    return factory(refuse, response_serializer=handler.response_serializer)


class UnparsableRequest:
    """What a request that does not parse (bad wire format, invalid UTF-8 in a string)
    becomes instead of an exception inside gRPC, which would answer INTERNAL."""

    def __init__(self, method: str, error: Exception):
        self.reason = (f"request to {method} is not a valid message ({type(error).__name__}: "
                       f"{clip_message(str(error))[:200]})")


class ParseGuardInterceptor(grpc.ServerInterceptor):
    """Answers a request that does not parse with INVALID_ARGUMENT and no traceback."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method.rsplit("/", 1)[-1]

        def guarded(parse):
            if parse is None:
                return None

            def parse_or_mark(data: bytes):
                try:
                    return parse(data)
                except Exception as exc:  # noqa: BLE001 - any parse failure is the caller's
                    return UnparsableRequest(method, exc)
            return parse_or_mark

        return _rebuild(handler, _refuse_unparsable, deserializer=guarded)


def _refuse_unparsable(behavior, streams_in: bool, streams_out: bool):
    """Wrap a behaviour so that an UnparsableRequest is refused as INVALID_ARGUMENT: before
    the servicer for a single request, as InvalidInput from the request iterator (which
    the servicer maps) for a stream."""
    if streams_in:
        def checked_stream(requests):
            for request in requests:
                if isinstance(request, UnparsableRequest):
                    raise InvalidInput(request.reason)
                yield request

        if streams_out:
            def stream_in_out(requests, context):
                yield from behavior(checked_stream(requests), context)
            return stream_in_out

        def stream_in(requests, context):
            return behavior(checked_stream(requests), context)
        return stream_in

    def refuse(request, context) -> bool:
        if isinstance(request, UnparsableRequest):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        return False

    if streams_out:
        def single_in_stream_out(request, context):
            refuse(request, context)
            yield from behavior(request, context)
        return single_in_stream_out

    def single(request, context):
        refuse(request, context)
        return behavior(request, context)
    return single


class DrainGate(grpc.ServerInterceptor):
    """Counts the RPCs in flight; until `open()` (the store and the encoder opened) and
    once draining, refuses new ones with UNAVAILABLE (retryable) while health and
    reflection keep answering: a starting server is not mistaken for one without a
    model, and a SIGTERM'd server reports NOT_SERVING for the whole drain instead of
    vanishing."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._in_flight = 0
        self._opened = False
        self._draining = False

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(OPEN_SERVICES):
            return handler
        if not self._opened:
            return refused_unread(handler, Unavailable(
                "server is starting (opening the store and the encoder); retry in a moment"))
        if self._draining:
            return refused_unread(handler, Unavailable(
                "server is shutting down; retry on another replica or after it restarts"))
        return _rebuild(handler, self._counted)

    def open(self) -> None:
        """Let the service's RPCs in: the engine has started."""
        self._opened = True

    def drain(self, timeout: float) -> bool:
        """Refuse new RPCs and wait up to `timeout` s for those in flight; True if none
        is left."""
        with self._idle:
            self._draining = True
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def _enter(self) -> None:
        with self._idle:
            self._in_flight += 1

    def _leave(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def _counted(self, behavior, streams_in: bool, streams_out: bool):
        if streams_out:
            def stream_behavior(request, context):
                self._enter()
                try:
                    yield from behavior(request, context)
                finally:
                    self._leave()
            return stream_behavior

        def unary_behavior(request, context):
            self._enter()
            try:
                return behavior(request, context)
            finally:
                self._leave()
        return unary_behavior


def metrics_observer(metrics) -> Observer:
    def observe(method: str, code: str, seconds: float) -> None:
        metrics.requests.labels(method, code).inc()
        metrics.latency.labels(method).observe(seconds)
    return observe


def log_observer(logger: logging.Logger) -> Observer:
    def observe(method: str, code: str, seconds: float) -> None:
        logger.info("rpc", extra={"rpc": method, "code": code, "ms": round(seconds * 1000, 2)})
    return observe


class PreSerializedResponses(grpc.ServerInterceptor):
    """The named methods may answer with responses already serialized (bytes), sent as
    they are; messages are serialized as usual. Export encodes its chunks from Arrow
    columns (server/row_encoding.py): parsing them into a message only for gRPC to
    serialize it again cost more than reading the rows."""

    def __init__(self, methods: Iterable[str]):
        self.methods = frozenset(methods)

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method not in self.methods:
            return handler
        serialize = handler.response_serializer

        def bytes_or_message(response):
            return response if isinstance(response, bytes) else serialize(response)

        return handler._replace(response_serializer=bytes_or_message)
