"""The one place where the client turns a gRPC failure into an envad exception.

The reverse of the server's mapping, derived from the same attribute: every error class
names the status code it travels as (`code`), and `error_for_code` finds the class for a
code. Codes the server never sends itself (deadline, cancel, permission denied by a proxy)
get client-side subclasses of EnvadError here, found the same way.
"""

from __future__ import annotations

import grpc

from envad.errors import EnvadError, Unavailable, error_for_code


class DeadlineExceeded(Unavailable):
    """The call did not finish within its deadline (the server may still be working)."""

    code = "DEADLINE_EXCEEDED"


class Cancelled(EnvadError):
    """The call was cancelled (by the caller or because the channel closed)."""

    code = "CANCELLED"


class PermissionDenied(EnvadError):
    """Credentials were accepted but the call is not allowed (sent by a proxy or gateway
    in front of the server; envad itself answers UNAUTHENTICATED)."""

    code = "PERMISSION_DENIED"


CLIENT_ERRORS: tuple[type[EnvadError], ...] = (DeadlineExceeded, Cancelled, PermissionDenied)


def error_class_for(code_name: str) -> type[EnvadError]:
    """The class a call failing with status `code_name` raises (EnvadError if none)."""
    for cls in CLIENT_ERRORS:
        if cls.code == code_name:
            return cls
    return error_for_code(code_name)


def status_name(exc: grpc.RpcError) -> str:
    """The status code name of a failed call ("UNKNOWN" when it carries none)."""
    code = exc.code() if hasattr(exc, "code") else None
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


def from_rpc_error(exc: grpc.RpcError, method: str = "") -> EnvadError:
    """The envad exception for a failed call; `.code` is the status name it arrived as."""
    name = status_name(exc)
    details = exc.details() if hasattr(exc, "details") else None
    cls = error_class_for(name)
    where = f"{method}: " if method else ""
    error = cls(f"{where}{details or name}")
    if cls is EnvadError:
        error.code = name  # keep the real status name on the generic class
    error.rpc_code = name
    return error
