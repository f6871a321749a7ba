"""The one place where the client turns a gRPC failure into an envad exception.

The server maps each domain error to one status code (envad.server.errors); here the
status code is mapped back with `envad.errors.error_for_code`, so callers catch the same
classes on both sides of the wire. Codes the domain does not define (deadline, cancel)
get client-side subclasses of EnvadError.
"""

from __future__ import annotations

import grpc

from envad.errors import EnvadError, PermissionDenied, Unavailable, error_for_code


class DeadlineExceeded(Unavailable):
    """The call did not finish within its deadline (the server may still be working)."""

    code = "DEADLINE_EXCEEDED"


class Cancelled(EnvadError):
    """The call was cancelled (by the caller or because the channel closed)."""

    code = "CANCELLED"


#: Status codes that the client maps to a class other than `error_for_code(name)`.
_CLIENT_CODES: dict[str, type[EnvadError]] = {
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "CANCELLED": Cancelled,
    "PERMISSION_DENIED": PermissionDenied,
}


def status_name(exc: grpc.RpcError) -> str:
    """The status code name of a failed call ("UNKNOWN" when it carries none)."""
    code = exc.code() if hasattr(exc, "code") else None
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


def from_rpc_error(exc: grpc.RpcError, method: str = "") -> EnvadError:
    """The envad exception for a failed call; `.code` is the status name it arrived as."""
    name = status_name(exc)
    details = exc.details() if hasattr(exc, "details") else None
    cls = _CLIENT_CODES.get(name) or error_for_code(name)
    where = f"{method}: " if method else ""
    error = cls(f"{where}{details or name}")
    if cls is EnvadError:
        error.code = name  # keep the real status name on the generic class
    error.rpc_code = name
    return error
