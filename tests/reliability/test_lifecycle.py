"""Shutdown, auth and metrics exposure of a real server: health answers NOT_SERVING for
the whole drain, unauthenticated bytes are never parsed, /metrics stays on loopback."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import SERVICE, ServerHandle, models_dir_in
from tiny_encoder import synthetic_images


def server_with(tmp_path: Path, tiny_model_path: Path, **env: str) -> ServerHandle:
    return ServerHandle(tmp_path / "data", models_dir_in(tmp_path, tiny_model_path),
                        extra_env=env)


def test_health_reports_not_serving_during_the_drain(envad_process):
    """Item 15: after SIGTERM, while an Ingest drains, health answers NOT_SERVING (it was
    unreachable) and new calls get UNAVAILABLE; the in-flight Ingest completes."""
    stub = pb_grpc.AnomalyServiceStub(envad_process.channel())
    images = synthetic_images("normal", 200, seed=21)
    outcome = {}

    def slow_ingest():
        def requests():
            for i in range(0, len(images), 10):
                time.sleep(0.1)
                yield pb.IngestRequest(items=[pb.IngestItem(image=pb.Image(data=d))
                                              for d in images[i:i + 10]])
        outcome["summary"] = stub.Ingest(requests(), timeout=60)

    thread = threading.Thread(target=slow_ingest)
    thread.start()
    time.sleep(0.3)
    assert envad_process.process is not None
    envad_process.process.terminate()
    seen, refused = set(), None
    with grpc.insecure_channel(envad_process.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        probe = pb_grpc.AnomalyServiceStub(channel)
        # until both are seen, the drain ends (the process exits) or 10 s pass: a loaded
        # machine may take a while to deliver the signal and switch health
        deadline = time.monotonic() + 10.0
        while (time.monotonic() < deadline and envad_process.process.poll() is None
               and not (health_pb2.HealthCheckResponse.NOT_SERVING in seen
                        and refused == grpc.StatusCode.UNAVAILABLE)):
            try:
                seen.add(health.Check(health_pb2.HealthCheckRequest(service=SERVICE),
                                      timeout=2).status)
                probe.GetInfo(pb.GetInfoRequest(), timeout=2)
            except grpc.RpcError as exc:
                refused = refused or exc.code()
            time.sleep(0.05)
    thread.join(60)
    assert envad_process.stop() == 0
    assert health_pb2.HealthCheckResponse.NOT_SERVING in seen
    assert refused == grpc.StatusCode.UNAVAILABLE
    assert outcome["summary"].inserted == len(images)


def test_unauthenticated_request_is_refused_before_it_is_parsed(tmp_path, tiny_model_path):
    """Item 6: without the token the request's bytes are never parsed: even bytes that
    are no message at all answer UNAUTHENTICATED (not a parse error)."""
    handle = server_with(tmp_path, tiny_model_path, ENVAD_AUTH_TOKEN="s3cret").start()
    try:
        call = handle.channel().unary_unary("/envad.v1.AnomalyService/Search")
        with pytest.raises(grpc.RpcError) as caught:
            call(b"\x1a\x10 not a message", timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        handle.stop()


def listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses with a socket listening on `port` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_metrics_stay_on_loopback_when_grpc_listens_everywhere(tmp_path, tiny_model_path,
                                                               unused_port):
    """Item 13: /metrics takes no token and names envs and model ids, so it binds
    metrics_host (loopback by default) even when the gRPC port binds 0.0.0.0."""
    handle = server_with(tmp_path, tiny_model_path, ENVAD_METRICS_PORT=str(unused_port))
    handle.host = "0.0.0.0"
    handle.start(wait_service=False)
    try:
        assert listening_addresses(unused_port) == {"127.0.0.1"}
    finally:
        handle.stop()
