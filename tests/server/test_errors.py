"""Every envad error class travels as its status code and comes back as the same class
(server: envad.server.errors, client: envad.client.errors, one table: envad.errors);
the error table of docs/api.md is the rendering of the classes."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from envad.client.errors import CLIENT_ERRORS, from_rpc_error
from envad.errors import ALL_ERRORS, EnvadError, InvalidInput, error_table_markdown
from envad.server.errors import abort_on_error, status_for
from envad.server.limits import MAX_ERROR_CHARS

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


class AbortedCall(grpc.RpcError):
    """What a client sees after the server's context.abort(code, details)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class RecordingContext:
    """The part of grpc.ServicerContext that abort_on_error uses: abort raises;
    `active` False stands for a client that cancelled."""

    def __init__(self, active: bool = True) -> None:
        self.active = active

    def is_active(self) -> bool:
        return self.active

    def abort(self, code: grpc.StatusCode, details: str):
        raise AbortedCall(code, details)


class Raiser:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    @abort_on_error
    def Unary(self, request, context):
        raise self.error

    @abort_on_error
    def Streaming(self, request, context):
        yield "first"
        raise self.error


@pytest.mark.parametrize("cls", ALL_ERRORS + CLIENT_ERRORS, ids=lambda c: c.__name__)
def test_each_error_travels_as_its_code_and_comes_back_as_its_class(cls) -> None:
    assert status_for(cls("why")) is grpc.StatusCode[cls.code]
    with pytest.raises(AbortedCall) as aborted:
        Raiser(cls("why")).Unary(None, RecordingContext())
    assert aborted.value.code() is grpc.StatusCode[cls.code]
    error = from_rpc_error(aborted.value, "Score")
    assert type(error) is cls and error.code == cls.code and str(error) == "Score: why"


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
def test_streaming_methods_map_errors_too(cls) -> None:
    stream = Raiser(cls("late")).Streaming(None, RecordingContext())
    assert next(stream) == "first"
    with pytest.raises(AbortedCall) as aborted:
        next(stream)
    assert aborted.value.code() is grpc.StatusCode[cls.code]


def test_codes_are_distinct_and_documented() -> None:
    codes = [cls.code for cls in ALL_ERRORS + CLIENT_ERRORS]
    assert len(set(codes)) == len(codes)
    assert all(cls.when for cls in ALL_ERRORS)


def test_other_exceptions_become_internal_without_their_message() -> None:
    with pytest.raises(AbortedCall) as aborted:
        Raiser(KeyError("secret path /etc")).Unary(None, RecordingContext())
    assert aborted.value.code() is grpc.StatusCode.INTERNAL
    assert "secret" not in aborted.value.details()
    assert type(from_rpc_error(aborted.value)).__name__ == "Internal"
    assert status_for(EnvadError("no code")) is grpc.StatusCode.UNKNOWN


def test_api_doc_error_table_is_the_rendering_of_the_classes() -> None:
    assert error_table_markdown() in API_DOC.read_text(), (
        "docs/api.md's error table differs from envad.errors: paste "
        "`python -c 'from envad.errors import error_table_markdown as t; print(t())'`")


def test_status_messages_are_one_bounded_line() -> None:
    """An error echoing a huge or multi-line value still travels as one short line."""
    with pytest.raises(AbortedCall) as aborted:
        Raiser(InvalidInput("bad value " + "x\n" * 50_000)).Unary(None, RecordingContext())
    details = aborted.value.details()
    assert "\n" not in details and len(details) <= MAX_ERROR_CHARS
    assert details.startswith("bad value x x")


def test_a_cancelled_call_is_not_an_internal_error(caplog) -> None:
    with pytest.raises(AbortedCall) as aborted:
        Raiser(RuntimeError("iterator ended")).Unary(None, RecordingContext(active=False))
    assert aborted.value.code() is grpc.StatusCode.CANCELLED
    assert "internal error" not in caplog.text


def test_a_stream_ended_idle_by_the_server_keeps_its_status(caplog) -> None:
    """The idle-stream watchdog (server/stream_limits.py) already answered the client
    DEADLINE_EXCEEDED; the handler's end is logged as that, not as a cancellation."""
    import logging

    from envad.server.stream_limits import IdleStream

    error = IdleStream("Ingest ended by the server: no request for 30 s")
    with caplog.at_level(logging.INFO), pytest.raises(AbortedCall) as aborted:
        list(Raiser(error).Streaming(None, RecordingContext(active=False)))
    assert aborted.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "no request for 30 s" in caplog.text and "cancelled" not in caplog.text
