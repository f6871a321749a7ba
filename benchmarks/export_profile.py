"""Where a ROWS export's time goes: the store read and the encoding alone, then both
timed inside a server process that streams them over gRPC while a client receives.

benchmarks.store_write's ROWS export, taken apart: `EmbeddingStore.iter_batches` (the
read) and `rows_chunk_bytes` (the encoding) of N seeded 512-d rows in 4,096-row chunks,
each timed alone (median of 7), then a bare gRPC server in a process of its own that
sends the encoded chunks as Export does (produced one chunk ahead by
`server.prefetch.prefetched`) and records how long its reads, encodings and sends took
while a client in this process receives and parses them (`--rounds` calls).

    python -m benchmarks.export_profile --rows 100000 --rounds 3

JSON lines: `export_alone` (read_s, encode_s) and one `export_streamed` per round
(read_s, encode_s, send_s and span_s in the server, client_s end to end).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

import grpc

from benchmarks.bare_stream import MAX_MESSAGE, identity, start_stream_server
from benchmarks.common import emit, log
from benchmarks.store_write import DIM, MODEL_ID, make_rows, time_writer

METHOD = "/bench.ExportProfile/Stream"
_PROVENANCE = b"p" * 200          # about the size of a served Provenance


def _timed_chunks(store, seconds: dict[str, float]):
    """The export's chunks, adding each read's and each encoding's seconds to `seconds`."""
    from envad.server.row_encoding import rows_chunk_bytes

    batches = store.iter_batches()
    while True:
        start = time.perf_counter()
        batch = next(batches, None)
        read = time.perf_counter()
        seconds["read_s"] += read - start
        if batch is None:
            return
        chunk = rows_chunk_bytes(batch, _PROVENANCE)
        seconds["encode_s"] += time.perf_counter() - read
        yield chunk


def _serve(db_dir: str, ports, results) -> None:
    """The streaming server (a spawned process): its timings go to `results` per call."""
    from envad.server.prefetch import prefetched
    from envad.server.store import EmbeddingStore

    store = EmbeddingStore(Path(db_dir), MODEL_ID, DIM)

    def stream(request: bytes, context):
        seconds = {"read_s": 0.0, "encode_s": 0.0, "send_s": 0.0}
        start = time.perf_counter()
        for chunk in prefetched(_timed_chunks(store, seconds)):
            sent = time.perf_counter()
            yield chunk
            seconds["send_s"] += time.perf_counter() - sent
        results.put({**seconds, "span_s": time.perf_counter() - start})

    server, port = start_stream_server(METHOD, stream)
    ports.put(port)
    server.wait_for_termination()


def time_alone(store) -> dict[str, float]:
    """Medians of 7: reading every batch, and encoding the batches already read."""
    from envad.server.row_encoding import rows_chunk_bytes

    def read() -> None:
        for _ in store.iter_batches():
            pass

    batches = list(store.iter_batches())

    def encode() -> None:
        for batch in batches:
            rows_chunk_bytes(batch, _PROVENANCE)

    out = {}
    for name, fn in (("read_s", read), ("encode_s", encode)):
        runs = []
        for _ in range(7):
            start = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - start)
        out[name] = statistics.median(runs)
    return out


def main() -> None:
    from envad.server.store import EmbeddingStore
    from envad.v1 import envad_pb2 as pb

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db_dir = Path(tmp) / "lancedb"
        log(f"writing {args.rows} x {DIM} rows ...")
        time_writer(db_dir, make_rows(args.rows), 4096)
        store = EmbeddingStore(db_dir, MODEL_ID, DIM)
        emit({"benchmark": "export_alone", "rows": args.rows,
              **{k: round(v, 3) for k, v in time_alone(store).items()}})
        spawn = multiprocessing.get_context("spawn")
        ports, results = spawn.Queue(), spawn.Queue()
        server = spawn.Process(target=_serve, args=(str(db_dir), ports, results), daemon=True)
        server.start()
        try:
            channel = grpc.insecure_channel(f"127.0.0.1:{ports.get(timeout=120)}", options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE)])
            call = channel.unary_stream(METHOD, request_serializer=identity,
                                        response_deserializer=pb.ExportChunk.FromString)
            for _ in range(args.rounds):
                start = time.perf_counter()
                received = sum(len(chunk.rows.rows) for chunk in call(b"", timeout=600))
                client = time.perf_counter() - start
                assert received == args.rows
                inside = results.get(timeout=60)
                emit({"benchmark": "export_streamed", "rows": args.rows,
                      **{k: round(v, 3) for k, v in inside.items()},
                      "client_s": round(client, 3)})
            channel.close()
        finally:
            server.kill()


if __name__ == "__main__":
    main()
