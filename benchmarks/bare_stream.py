"""What gRPC alone costs a stream: pre-made messages of given sizes, sent by a bare gRPC
server in a process of its own, received without parsing.

The reference beside Export in benchmarks.store_write: the same number of messages and
bytes as a ROWS export, with no store to read, nothing to encode and nothing to parse,
so it bounds from below what any export through gRPC's Python stack can take here.

    python -m benchmarks.bare_stream SIZES_JSON     # prints the port; stops at EOF on stdin
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import grpc

METHOD = "/bench.BareStream/Stream"
MAX_MESSAGE = 512 * 1024 * 1024


def identity(data: bytes) -> bytes:
    """The (de)serializer of a stream whose messages are bytes as they are."""
    return data


def start_stream_server(method_path: str, stream) -> tuple[grpc.Server, int]:
    """A started gRPC server on a free loopback port whose one method, `method_path`
    ("/service/method"), streams what `stream(request, context)` yields, as bytes."""
    handler = grpc.unary_stream_rpc_method_handler(
        stream, request_deserializer=identity, response_serializer=identity)
    service, method = method_path.strip("/").split("/")
    server = grpc.server(futures.ThreadPoolExecutor(2),
                         options=[("grpc.max_send_message_length", MAX_MESSAGE)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        service, {method: handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def serve(sizes: list[int]) -> None:
    """Serve the stream until stdin closes; print the port once listening."""
    payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]

    def stream(request: bytes, context) -> object:
        yield from payloads

    server, port = start_stream_server(METHOD, stream)
    print(port, flush=True)
    sys.stdin.read()
    server.stop(0)


class BareStream:
    """A bare stream server in a subprocess (a context manager) and a timed client."""

    def __init__(self, sizes: list[int], workdir: Path):
        self.sizes_file = Path(workdir) / "bare_stream_sizes.json"
        self.sizes_file.write_text(json.dumps(sizes))
        self.total = sum(sizes)

    def __enter__(self) -> BareStream:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bare_stream", str(self.sizes_file)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", MAX_MESSAGE)])
        self.call = self.channel.unary_stream(METHOD, request_serializer=identity,
                                              response_deserializer=identity)
        return self

    def time_stream(self) -> float:
        """Seconds to receive every message once (its bytes, unparsed)."""
        start = time.perf_counter()
        received = sum(len(message) for message in self.call(b"", timeout=600))
        seconds = time.perf_counter() - start
        assert received == self.total
        return seconds

    def __exit__(self, *exc) -> None:
        self.channel.close()
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


if __name__ == "__main__":
    serve(json.loads(Path(sys.argv[1]).read_text()))
