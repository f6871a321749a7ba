"""The one table from envad domain errors to gRPC status codes.

`abort_on_error` wraps servicer methods: an EnvadError becomes its status code with the
error's message; anything else is logged and becomes INTERNAL (no stack trace leaks).
"""

from __future__ import annotations

import functools
import inspect
import logging

import grpc

from envad.errors import (
    EnvadError, FailedPrecondition, Internal, InvalidInput, NotFound, PermissionDenied,
    ResourceExhausted, Unavailable,
)

log = logging.getLogger(__name__)

STATUS_FOR_ERROR: dict[type[EnvadError], grpc.StatusCode] = {
    InvalidInput: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    PermissionDenied: grpc.StatusCode.UNAUTHENTICATED,
    Internal: grpc.StatusCode.INTERNAL,
}


def status_for(error: BaseException) -> grpc.StatusCode:
    """The status code an exception travels as (INTERNAL for non-envad errors)."""
    for cls in type(error).__mro__:
        if cls in STATUS_FOR_ERROR:
            return STATUS_FOR_ERROR[cls]
    return grpc.StatusCode.INTERNAL if not isinstance(error, EnvadError) \
        else grpc.StatusCode.UNKNOWN


def _abort(context: grpc.ServicerContext, error: BaseException, method: str) -> None:
    code = status_for(error)
    if isinstance(error, EnvadError):
        context.abort(code, str(error))
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
