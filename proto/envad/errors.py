"""Domain errors shared by server and client.

The server raises these; `envad.server.errors` maps each to one gRPC status code, and
the client maps the status code back, so callers on both sides catch the same classes.
"""

from __future__ import annotations


class EnvadError(Exception):
    """Base of every envad error; `code` is the gRPC status code name it travels as."""

    code = "UNKNOWN"


class InvalidInput(EnvadError):
    """A request or one of its items is malformed (bad image, bad field, bad filter)."""

    code = "INVALID_ARGUMENT"


class NotFound(EnvadError):
    """A named thing (model, row, bundle) does not exist."""

    code = "NOT_FOUND"


class FailedPrecondition(EnvadError):
    """The server is not ready for this request (no model, no fitted detectors)."""

    code = "FAILED_PRECONDITION"


class ResourceExhausted(EnvadError):
    """A limit was hit (request too large, queue full, disk full)."""

    code = "RESOURCE_EXHAUSTED"


class Unavailable(EnvadError):
    """The server cannot take the request now (starting, shutting down); retry later."""

    code = "UNAVAILABLE"


class PermissionDenied(EnvadError):
    """Missing or wrong credentials."""

    code = "UNAUTHENTICATED"


class Internal(EnvadError):
    """A bug or an unexpected failure inside the server."""

    code = "INTERNAL"


ALL_ERRORS: tuple[type[EnvadError], ...] = (
    InvalidInput,
    NotFound,
    FailedPrecondition,
    ResourceExhausted,
    Unavailable,
    PermissionDenied,
    Internal,
)


def error_for_code(code_name: str) -> type[EnvadError]:
    """The error class that travels as gRPC status `code_name` (EnvadError if none)."""
    for cls in ALL_ERRORS:
        if cls.code == code_name:
            return cls
    return EnvadError
