"""The drain gate on a real gRPC server on loopback: closed while the server starts,
open once the engine has started, closed again while draining; health always answers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from envad.server.interceptors import DrainGate

ECHO = "/envad.test.Echo/Say"


@pytest.fixture()
def gated():
    """A loopback server with one echo method behind a DrainGate, and a channel to it."""
    gate = DrainGate()
    server = grpc.server(ThreadPoolExecutor(2), interceptors=[gate])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "envad.test.Echo", {"Say": grpc.unary_unary_rpc_method_handler(lambda req, ctx: req)})])
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield gate, channel
    channel.close()
    server.stop(None)


def _echo(channel: grpc.Channel) -> bytes:
    say: Any = channel.unary_unary(ECHO)
    return say(b"hello", timeout=10)


def test_calls_before_the_engine_started_are_told_to_retry(gated) -> None:
    gate, channel = gated
    with pytest.raises(grpc.RpcError) as refused:
        _echo(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "starting" in str(refused.value.details())
    health_stub = health_pb2_grpc.HealthStub(channel)
    assert health_stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
        health_pb2.HealthCheckResponse.SERVING
    gate.open()
    assert _echo(channel) == b"hello"


def test_a_drained_gate_refuses_new_calls(gated) -> None:
    gate, channel = gated
    gate.open()
    assert gate.drain(timeout=5)
    with pytest.raises(grpc.RpcError) as refused:
        _echo(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in str(refused.value.details())
