"""Domain errors shared by server and client, and the one table of their status codes.

Each class carries the gRPC status code name it travels as (`code`) and when the server
raises it (`when`). The server's mapping (`envad.server.errors`), the client's reverse
mapping (`envad.client.errors`) and the error table of docs/api.md are all derived from
these attributes, so the table has one owner.
"""

from __future__ import annotations


class EnvadError(Exception):
    """Base of every envad error; `code` is the gRPC status code name it travels as."""

    code = "UNKNOWN"
    when = ""
    #: on the client, the status name the error arrived as (set by from_rpc_error)
    rpc_code = ""


class InvalidInput(EnvadError):
    """A request or one of its items is malformed (bad image, bad field, bad filter)."""

    code = "INVALID_ARGUMENT"
    when = ("undecodable image (the message names the item: id, uri or index), bad field "
            "values, a field or filter beyond a request limit (see the limits table), a "
            "request that does not parse, wrong vector dimension, threshold outside (0, 1]")


class NotFound(EnvadError):
    """A named thing (model, row, bundle) does not exist."""

    code = "NOT_FOUND"
    when = "unknown model id (the message lists the known ones), unknown row id"


class FailedPrecondition(EnvadError):
    """The server is not ready for this request (no model, no fitted detectors)."""

    code = "FAILED_PRECONDITION"
    when = ("no active encoder, an encoder refused at activation (its store table holds "
            "vectors of another size, or the file's weights changed under the same model "
            "id: the message names both), no fitted bundle, nothing stored to fit on — the "
            "message says what to do")


class ResourceExhausted(EnvadError):
    """A limit was hit (request too large, queue full, disk full)."""

    code = "RESOURCE_EXHAUSTED"
    when = ("a store write failed (e.g. disk full): nothing of that write was "
            "acknowledged; a message above `max_message_mb` (refused by gRPC unread)")


class Unavailable(EnvadError):
    """The server cannot take the request now (starting, shutting down); retry later."""

    code = "UNAVAILABLE"
    when = "shutting down (new calls during the drain); retry"


class Unauthenticated(EnvadError):
    """Missing or wrong credentials (the bearer token)."""

    code = "UNAUTHENTICATED"
    when = "missing or wrong bearer token"


class Internal(EnvadError):
    """A bug or an unexpected failure inside the server."""

    code = "INTERNAL"
    when = ("the server's own state is broken (e.g. a bundle file does not match its "
            "manifest); the message names what")


#: Every error the server raises, in the order of the docs table.
ALL_ERRORS: tuple[type[EnvadError], ...] = (
    InvalidInput,
    NotFound,
    FailedPrecondition,
    ResourceExhausted,
    Unavailable,
    Unauthenticated,
    Internal,
)


#: What the server does with an exception that is not an EnvadError (`abort_on_error`).
UNEXPECTED_WHEN = "a bug; logged with its stack trace, never sent to the caller"


def error_for_code(code_name: str) -> type[EnvadError]:
    """The error class that travels as gRPC status `code_name` (EnvadError if none)."""
    for cls in ALL_ERRORS:
        if cls.code == code_name:
            return cls
    return EnvadError


def error_table_markdown() -> str:
    """The error table of docs/api.md, rendered from the classes (a test compares)."""
    lines = ["| envad error | gRPC status | when |", "| --- | --- | --- |"]
    lines += [f"| `{cls.__name__}` | `{cls.code}` | {cls.when} |" for cls in ALL_ERRORS]
    lines.append(f"| any other exception | `{Internal.code}` | {UNEXPECTED_WHEN} |")
    return "\n".join(lines) + "\n"
