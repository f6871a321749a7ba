"""Streams never starve the other calls, and a port is never shared (issue 46, points 1
and 4), against real `envad serve` processes on loopback.

- 64 streaming calls (ScoreStream and Ingest) that open and send nothing: at most
  `max_streams` (8 of the 16 handler threads) are admitted, the others are refused at once
  with RESOURCE_EXHAUSTED, and Score, Search, GetInfo and health from another client
  still answer.
- An admitted stream that sends nothing ends at its idle deadline with DEADLINE_EXCEEDED,
  and the server's threads come back to what they were; a stream that keeps sending is
  never cut.
- A second server on a port that a server, or another program, listens on exits
  non-zero with one line on stderr naming the port.

Timings are never asserted tightly: a call that "answers" answers within a generous
timeout that a starved server would exceed (it never answers at all).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import SERVICE, ServerHandle, fit_normal_rows, models_dir_in
from tiny_encoder import synthetic_images

STREAMS = 64
MAX_STREAMS = 8          # the default: half of the 16 handler threads
ANSWER_TIMEOUT = 5.0     # a starved server never answers; a served one in milliseconds
IDLE_SECONDS = 2.0


def _server(root: Path, tiny_model_path: Path, **env: str) -> ServerHandle:
    handle = ServerHandle(root / "data", models_dir_in(root, tiny_model_path), extra_env=env)
    handle.log_path = root / "server.log"
    return handle


@pytest.fixture(scope="module")
def held_server(tmp_path_factory, tiny_model_path) -> Iterator[ServerHandle]:
    """A fitted server whose streams are ended only after a minute without a request."""
    handle = _server(tmp_path_factory.mktemp("streams-held"), tiny_model_path,
                     ENVAD_STREAM_IDLE_SECONDS="60")
    handle.start()
    fit_normal_rows(pb_grpc.AnomalyServiceStub(handle.channel()), count=100)
    yield handle
    handle.stop()


@pytest.fixture
def idle_server(tmp_path, tiny_model_path) -> Iterator[ServerHandle]:
    """An empty server whose streams end after 2 s without a request."""
    handle = _server(tmp_path, tiny_model_path,
                     ENVAD_STREAM_IDLE_SECONDS=str(IDLE_SECONDS))
    handle.start()
    yield handle
    handle.stop()


def _silent(release: threading.Event) -> Iterator:
    """Requests of a client that sends nothing until `release` is set."""
    release.wait()
    yield from ()


class IdleStreams:
    """`count` streaming calls, alternately ScoreStream and Ingest, over 4 channels, each
    of whose request iterators blocks: the client opens the call and sends nothing."""

    def __init__(self, address: str, count: int = STREAMS):
        self.release = threading.Event()
        self.channels = [grpc.insecure_channel(address) for _ in range(4)]
        stubs = [pb_grpc.AnomalyServiceStub(c) for c in self.channels]
        self.opened = time.monotonic()
        self.calls: list[grpc.Future] = []
        for i in range(count):
            stub = stubs[i % len(stubs)]
            if i % 2:
                self.calls.append(stub.Ingest.future(_silent(self.release), timeout=120))
            else:
                self.calls.append(stub.ScoreStream(_silent(self.release), timeout=120))

    def ended(self) -> list[grpc.Future]:
        return [call for call in self.calls if call.done()]

    def wait_until(self, ended: int, timeout: float) -> list[grpc.Future]:
        """Waits until at least `ended` calls have ended (or `timeout` s); returns them."""
        deadline = time.monotonic() + timeout
        while len(self.ended()) < ended and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.ended()

    def close(self) -> None:
        self.release.set()
        for call in self.calls:
            call.cancel()
        for channel in self.channels:
            channel.close()


def _code(call: grpc.Future) -> grpc.StatusCode:
    error = call.exception(timeout=0)
    return grpc.StatusCode.OK if error is None else cast(grpc.Call, error).code()


def _details(call: grpc.Future) -> str:
    return cast(grpc.Call, call.exception(timeout=0)).details() or ""


def _threads(handle: ServerHandle) -> int:
    assert handle.process is not None
    status = Path(f"/proc/{handle.process.pid}/status").read_text()
    return int(next(line for line in status.splitlines()
                    if line.startswith("Threads:")).split()[1])


def _settled_threads(handle: ServerHandle, seconds: float = 1.0) -> int:
    """The server's thread count once it has not changed for `seconds`."""
    last, since = _threads(handle), time.monotonic()
    deadline = since + 15
    while time.monotonic() - since < seconds and time.monotonic() < deadline:
        time.sleep(0.1)
        now = _threads(handle)
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_idle_streams_never_starve_unary_calls_or_health(held_server):
    """64 streams that send nothing: health, Score, Search and GetInfo from another client
    answer (before the bound, the 16th stream took the last handler thread and every
    other call waited); 8 streams are admitted, the other 56 refused with
    RESOURCE_EXHAUSTED naming max_streams."""
    streams = IdleStreams(held_server.address)
    try:
        with grpc.insecure_channel(held_server.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            stub = pb_grpc.AnomalyServiceStub(channel)
            image = pb.Image(data=synthetic_images("odd", 1, seed=5)[0], env="cam-a")
            started = time.monotonic()
            for service in ("", SERVICE):
                assert health.Check(health_pb2.HealthCheckRequest(service=service),
                                    timeout=ANSWER_TIMEOUT).status == \
                    health_pb2.HealthCheckResponse.SERVING
            score = stub.Score(pb.ScoreRequest(images=[image]), timeout=ANSWER_TIMEOUT)
            assert len(score.results) == 1
            found = stub.Search(pb.SearchRequest(image=image.data, k=3), timeout=ANSWER_TIMEOUT)
            assert found.neighbors
            stub.GetInfo(pb.GetInfoRequest(), timeout=ANSWER_TIMEOUT)
            print(f"\nhealth x2, Score, Search, GetInfo under {STREAMS} idle streams: "
                  f"{time.monotonic() - started:.3f} s")
        ended = streams.wait_until(STREAMS - MAX_STREAMS, timeout=30)
        assert len(ended) == STREAMS - MAX_STREAMS, "refusals did not come at once"
        assert {_code(call) for call in ended} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert "max_streams" in _details(ended[0])
        time.sleep(0.5)   # the admitted ones stay open: their deadline is a minute away
        assert len(streams.ended()) == STREAMS - MAX_STREAMS
    finally:
        streams.close()


def test_idle_streams_end_at_their_deadline_and_threads_come_back(idle_server):
    """With a 2 s idle deadline, the 8 admitted streams end with DEADLINE_EXCEEDED about
    2 s after they opened, their handler threads return, and a second round of 64 leaves
    the server with the threads the first left (the pool keeps the threads it started)."""
    before = _settled_threads(idle_server)
    counts = []
    for round_ in range(2):
        streams = IdleStreams(idle_server.address)
        try:
            ended = streams.wait_until(STREAMS, timeout=IDLE_SECONDS + 30)
            took = time.monotonic() - streams.opened
            assert len(ended) == STREAMS, "idle streams were never ended"
            codes = [_code(call) for call in ended]
            assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == STREAMS - MAX_STREAMS
            idle = [call for call in ended
                    if _code(call) == grpc.StatusCode.DEADLINE_EXCEEDED]
            assert len(idle) == MAX_STREAMS, codes
            assert "no request for 2 s" in _details(idle[0])
            assert took >= IDLE_SECONDS - 0.1
        finally:
            streams.close()
        with grpc.insecure_channel(idle_server.address) as channel:   # still serving
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                      timeout=ANSWER_TIMEOUT)
        counts.append(_settled_threads(idle_server))
        print(f"\nround {round_ + 1}: {STREAMS} idle streams ended after {took:.2f} s; "
              f"threads {before} before, {counts[-1]} after")
    # each round may start more of the pool's threads (it starts them as calls need them,
    # up to `workers`, 16, and keeps them), never one a stream: 64 idle streams twice
    # leave at most the pool's threads above the start
    assert counts[0] <= before + 16 + 2
    assert counts[1] <= before + 16 + 2


def test_a_stream_that_keeps_sending_is_not_cut(idle_server):
    """Requests 0.5 s apart for 3 s, longer than the 2 s idle deadline: every one is
    answered and the stream ends OK."""
    stub = pb_grpc.AnomalyServiceStub(idle_server.channel())
    image = pb.Image(data=synthetic_images("normal", 1, seed=3)[0])

    def requests():
        for _ in range(6):
            time.sleep(0.5)
            yield pb.IngestRequest(items=[pb.IngestItem(image=image)])

    summary = stub.Ingest(requests(), timeout=60)
    assert summary.inserted + summary.duplicates == 6


def _second_server(tmp_path: Path, tiny_model_path: Path, port: int
                   ) -> subprocess.CompletedProcess:
    second = _server(tmp_path / "second", tiny_model_path)
    second.port = port
    try:
        return subprocess.run(second.command(), capture_output=True, text=True, timeout=60,
                              env={**os.environ, "ENVAD_LOG_FORMAT": "text"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"a second server started on port {port} (and ran until killed)")


def test_a_second_server_on_a_used_port_exits_with_one_line(idle_server, tmp_path,
                                                           tiny_model_path):
    """Before: it started (gRPC shared the port) and clients' calls were split between two
    stores."""
    done = _second_server(tmp_path, tiny_model_path, idle_server.port)
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert f"port {idle_server.port}" in lines[0] and "in use" in lines[0]
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr
    with grpc.insecure_channel(idle_server.address) as channel:   # the first one serves on
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                  timeout=ANSWER_TIMEOUT)


def test_a_port_held_by_another_program_exits_with_one_line(tmp_path, tiny_model_path):
    """Before: a C-core log line and `unexpected RuntimeError`."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = _second_server(tmp_path, tiny_model_path, port)
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert f"port {port}" in lines[0] and "in use" in lines[0]
    assert "unexpected" not in done.stderr and sys.executable not in done.stderr
