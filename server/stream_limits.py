"""Streaming calls never starve the others: a bound on the streams open at once, and an
idle deadline on a stream's requests.

The synchronous gRPC server runs each call on one of its `workers` handler threads
(worker_pool.py) for the call's whole life, so a stream whose client sends nothing holds
its thread; 16 of them used to leave no thread for anything else, health included.
`StreamGate`:

- admits at most `limit` streaming calls at once (every method that streams requests or
  responses: ScoreStream, Ingest, Export, health's Watch, reflection); one more is
  refused at once with RESOURCE_EXHAUSTED. `limit` is below `workers`, so the other
  threads are always there for unary calls and health checks;
- ends a stream whose client has sent no request for `idle_seconds` while its handler
  waits for one: one watchdog thread checks every open stream and cancels an idle one
  with DEADLINE_EXCEEDED and a message saying why; the handler's wait for the request
  then ends and its thread returns to the pool.

Time the handler spends on a request (scoring, storing) never counts as idle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import grpc

from envad.errors import EnvadError, ResourceExhausted
from envad.server.errors import status_for
from envad.server.interceptors import _rebuild

log = logging.getLogger(__name__)


class IdleStream(EnvadError):
    """A stream whose client sent no request within the idle deadline (already answered
    DEADLINE_EXCEEDED by the watchdog)."""

    code = "DEADLINE_EXCEEDED"


class _Stream:
    """One admitted streaming call: since when its handler waits for a request."""

    __slots__ = ("method", "context", "waiting_since", "expired")

    def __init__(self, method: str, context: grpc.ServicerContext):
        self.method = method
        self.context = context
        self.waiting_since: float | None = None
        self.expired = False


class StreamGate(grpc.ServerInterceptor):
    """At most `limit` streaming calls at once; each ends after `idle_seconds` without a
    request (0: never)."""

    def __init__(self, limit: int, idle_seconds: float):
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._streams: set[_Stream] = set()
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None
        if idle_seconds > 0:
            self._watchdog = threading.Thread(target=self._watch, name="stream-idle",
                                              daemon=True)
            self._watchdog.start()

    @property
    def open_streams(self) -> int:
        with self._lock:
            return len(self._streams)

    def close(self) -> None:
        """Stop the watchdog (the server has stopped)."""
        self._closed.set()
        if self._watchdog is not None:
            self._watchdog.join()

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or not (handler.request_streaming or handler.response_streaming):
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        return _rebuild(handler, lambda b, i, o: self._bounded(b, i, o, method))

    def _admit(self, method: str, context: grpc.ServicerContext) -> _Stream:
        """A slot for this call, or RESOURCE_EXHAUSTED at once when all are taken."""
        stream = _Stream(method, context)
        with self._lock:
            if len(self._streams) < self.limit:
                self._streams.add(stream)
                return stream
        error = ResourceExhausted(
            f"{method} refused: {self.limit} streaming calls are open, the most this server "
            f"takes at once (max_streams); retry when one has ended, or send single "
            f"requests (Score) meanwhile")
        context.abort(status_for(error), str(error))
        raise AssertionError("abort returns only by raising")   # pragma: no cover

    def _release(self, stream: _Stream) -> None:
        with self._lock:
            self._streams.discard(stream)

    def _bounded(self, behavior, streams_in: bool, streams_out: bool, method: str):
        if streams_out:
            def stream_behavior(request, context):
                stream = self._admit(method, context)
                try:
                    yield from behavior(self._watched(request, stream) if streams_in
                                        else request, context)
                finally:
                    self._release(stream)
            return stream_behavior

        def unary_behavior(request, context):
            stream = self._admit(method, context)
            try:
                return behavior(self._watched(request, stream) if streams_in else request,
                                context)
            finally:
                self._release(stream)
        return unary_behavior

    def _watched(self, requests, stream: _Stream) -> Iterator:
        """`requests`, its waits for the next request visible to the watchdog."""
        iterator = iter(requests)
        while True:
            with self._lock:
                stream.waiting_since = time.monotonic()
            try:
                request = next(iterator)
            except StopIteration:
                if stream.expired:   # the cancel may end the requests as if sent
                    raise self._idle_error(stream) from None
                return
            except Exception as exc:
                if stream.expired:
                    raise self._idle_error(stream) from exc
                raise
            finally:
                with self._lock:
                    stream.waiting_since = None
            if stream.expired:   # the request came as the watchdog ended the call
                raise self._idle_error(stream)
            yield request

    def _idle_error(self, stream: _Stream) -> IdleStream:
        return IdleStream(f"{stream.method} ended by the server: no request for "
                          f"{self.idle_seconds:g} s (stream_idle_seconds); open a new "
                          f"stream when there is something to send")

    def _watch(self) -> None:
        """Every tenth of the idle deadline (at most 1 s), end the streams idle past it."""
        period = min(1.0, self.idle_seconds / 10)
        while not self._closed.wait(period):
            now = time.monotonic()
            with self._lock:
                idle = [s for s in self._streams if not s.expired and s.waiting_since
                        is not None and now - s.waiting_since >= self.idle_seconds]
                for stream in idle:
                    stream.expired = True
            for stream in idle:
                _end(stream.context, self._idle_error(stream))


def _end(context: grpc.ServicerContext, error: EnvadError) -> None:
    """End a call from outside its handler with `error`'s status and message. gRPC's
    public `cancel()` can only say CANCELLED "Cancelled"; the call object under it takes a
    status and details (grpcio's server context keeps it as `_rpc_event.call`)."""
    code = status_for(error).value[0]
    call = getattr(getattr(context, "_rpc_event", None), "call", None)
    try:
        if call is not None:
            call.cancel(code, str(error))
            return
    except Exception:  # noqa: BLE001 - fall back to the public cancel
        log.debug("cancel with a status failed", exc_info=True)
    context.cancel()
