"""gRPC status -> envad exception, in one table."""

from __future__ import annotations

import grpc
import pytest

from envad.client.errors import Cancelled, DeadlineExceeded, from_rpc_error
from envad.errors import ALL_ERRORS, EnvadError, PermissionDenied


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "why") -> None:
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


@pytest.mark.parametrize("cls", ALL_ERRORS)
def test_every_domain_error_round_trips(cls) -> None:
    error = from_rpc_error(FakeRpcError(grpc.StatusCode[cls.code], "boom"), "Score")
    assert type(error) is cls
    assert error.code == cls.code
    assert str(error) == "Score: boom"


@pytest.mark.parametrize("code, cls", [
    ("DEADLINE_EXCEEDED", DeadlineExceeded), ("CANCELLED", Cancelled),
    ("PERMISSION_DENIED", PermissionDenied)])
def test_client_side_codes(code, cls) -> None:
    assert type(from_rpc_error(FakeRpcError(grpc.StatusCode[code]))) is cls


def test_unknown_code_keeps_its_name() -> None:
    error = from_rpc_error(FakeRpcError(grpc.StatusCode.DATA_LOSS))
    assert type(error) is EnvadError and error.code == "DATA_LOSS"
