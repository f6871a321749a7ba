"""A call without the right bearer token is refused before its request body is received:
a body above the server's message limit answers UNAUTHENTICATED, not the
RESOURCE_EXHAUSTED that receiving it would give, for every kind of method."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import SERVICE, InProcessServer, models_dir_in
from tiny_encoder import synthetic_images

TOKEN = "s3cret"
LIMIT_MB = 1
OVERSIZED = b"\x00" * (2 * LIMIT_MB * 1024 * 1024)   # twice the server's message limit
WORKERS = 4
REFUSALS = {   # metadata of a call the token check refuses
    "no token": (),
    "bad token": (("authorization", "Bearer wrong"),),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_path) -> Iterator[InProcessServer]:
    root = tmp_path_factory.mktemp("auth")
    handle = InProcessServer(root / "data", models_dir_in(root, tiny_model_path), extra_env={
        "ENVAD_AUTH_TOKEN": TOKEN, "ENVAD_MAX_MESSAGE_MB": str(LIMIT_MB),
        "ENVAD_WORKERS": str(WORKERS)})
    handle.start()
    yield handle
    handle.stop()


def raw(data: bytes) -> bytes:
    return data


def oversized_call(channel: grpc.Channel, method: str, metadata) -> None:
    """Send OVERSIZED bytes (no valid message) to `method` of each kind: the bytes are
    refused by whatever reads them first."""
    path = f"/{SERVICE}/{method}"
    as_bytes = {"request_serializer": raw, "response_deserializer": raw}
    if method == "Score":
        channel.unary_unary(path, **as_bytes)(OVERSIZED, metadata=metadata, timeout=30)
    elif method == "Export":
        list(channel.unary_stream(path, **as_bytes)(OVERSIZED, metadata=metadata, timeout=30))
    elif method == "Ingest":
        channel.stream_unary(path, **as_bytes)(iter([OVERSIZED]), metadata=metadata, timeout=30)
    else:
        list(channel.stream_stream(path, **as_bytes)(iter([OVERSIZED]), metadata=metadata,
                                                   timeout=30))


METHODS = ("Score", "Export", "Ingest", "ScoreStream")   # unary, server, client, bidi


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("refusal", REFUSALS)
def test_refused_call_answers_before_its_oversized_body(server, method, refusal):
    with server.channel() as channel:
        with pytest.raises(grpc.RpcError) as caught:
            oversized_call(channel, method, REFUSALS[refusal])
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, caught.value.details()


@pytest.mark.parametrize("method", METHODS)
def test_authorised_oversized_body_is_received_and_refused_for_its_size(server, method):
    """The contrast: with the token the same bytes are received, and the size limit
    refuses them."""
    with server.channel() as channel:
        with pytest.raises(grpc.RpcError) as caught:
            oversized_call(channel, method, (("authorization", f"Bearer {TOKEN}"),))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value.details()


def endless_ingest() -> Iterator[pb.IngestRequest]:
    for i in itertools.count():
        yield pb.IngestRequest(items=[pb.IngestItem(image=pb.Image(data=b"x", id=f"e{i}"))])


def refused_ingest(stub: pb_grpc.AnomalyServiceStub) -> grpc.StatusCode:
    try:
        stub.Ingest(endless_ingest(), timeout=30)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_refusals_hold_no_handler_thread(server):
    """Refused streams whose client never stops sending end at once, more of them than
    the server has handler threads; authorised calls work right after."""
    with server.channel() as channel:
        stub = pb_grpc.AnomalyServiceStub(channel)
        with ThreadPoolExecutor(WORKERS * 2) as pool:
            codes = set(pool.map(lambda _: refused_ingest(stub), range(WORKERS * 4)))
        assert codes == {grpc.StatusCode.UNAUTHENTICATED}
        token = (("authorization", f"Bearer {TOKEN}"),)
        images = synthetic_images("normal", 2, seed=5)
        summary = stub.Ingest(iter([pb.IngestRequest(items=[
            pb.IngestItem(image=pb.Image(data=d, env="cam-a")) for d in images])]),
            metadata=token, timeout=30)
        assert summary.inserted == 2
        assert stub.GetInfo(pb.GetInfoRequest(), metadata=token, timeout=30).total_rows >= 2
