"""Domain errors to gRPC status codes, derived from each error class's `code`.

`abort_on_error` wraps servicer methods: an EnvadError becomes its status code with the
error's message (one line, at most `limits.MAX_ERROR_CHARS`, so an echoed value can never
push the status past gRPC's metadata limit); anything else is logged and becomes
INTERNAL (no stack trace leaks).
"""

from __future__ import annotations

import functools
import inspect
import logging

import grpc

from envad.errors import EnvadError
from envad.server.limits import clip_message

log = logging.getLogger(__name__)


def status_for(error: BaseException) -> grpc.StatusCode:
    """The status code an exception travels as: its class's `code` (envad.errors owns the
    table), INTERNAL for anything that is not an EnvadError."""
    if not isinstance(error, EnvadError):
        return grpc.StatusCode.INTERNAL
    return getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN)


def _abort(context: grpc.ServicerContext, error: BaseException, method: str) -> None:
    if not context.is_active():   # the client cancelled or went away: nothing to answer
        if isinstance(error, EnvadError) and error.code == "DEADLINE_EXCEEDED":
            # the server ended an idle stream, which told the client (stream_limits.py)
            log.info("%s", clip_message(str(error)))
            context.abort(status_for(error), clip_message(str(error)))
        log.info("%s ended: the client cancelled or disconnected", method)
        context.abort(grpc.StatusCode.CANCELLED, "cancelled by the client")
    code = status_for(error)
    if isinstance(error, EnvadError):   # one line, bounded: echoed input never overflows
        context.abort(code, clip_message(str(error)))
    log.exception("internal error in %s", method, exc_info=error)
    context.abort(code, f"internal error in {method}: {type(error).__name__}")


def abort_on_error(method):
    """Decorator for servicer methods (plain or generator) mapping errors to statuses."""
    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def stream_wrapper(self, request, context):
            try:
                yield from method(self, request, context)
            except Exception as exc:  # noqa: BLE001 - mapped to a status
                _abort(context, exc, method.__name__)
        return stream_wrapper

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except Exception as exc:  # noqa: BLE001 - mapped to a status
            _abort(context, exc, method.__name__)
    return wrapper
