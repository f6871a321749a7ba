"""Export's ROWS format: envad's column-wise wire encoder against protobuf's own
serialisation, on the encoding alone and on the whole Export RPC.

The server encodes each 4,096-row chunk of a ROWS export straight from the Arrow
columns into ExportChunk wire bytes (server/row_encoding.py). The reference is protobuf
itself: the same chunk built as messages (`pb.ExportChunk`, one `Row` a row added in
place, the vector from a Python list) and serialised with `SerializeToString`. Both
encode the same rows of a real store of `--rows` seeded 512-d rows (camera, label,
split, capture time, uri, sha256, event) and give the same bytes (checked first).

- rows_encode: each encoder over every batch of the store, read once beforehand
  (`EmbeddingStore.iter_batches`), best of `--rounds`; rows/s and the ratio;
- rows_export_rpc: Export in ROWS format through gRPC from two real `envad serve`
  processes on copies of the store, one as shipped and one whose export encodes with
  protobuf, received and parsed by a client in this process, the servers taken in turn
  over `--rounds` rounds (median).

    python -m benchmarks.rows_export --rows 50000 --rounds 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.common import emit, log
from benchmarks.models import build_resnet18_onnx
from benchmarks.store_write import DIM, MODEL_ID, time_export, time_writer
from envad.client.server_process import LocalServer
from envad.server.store import Row
from envad.v1 import envad_pb2 as pb

SERVE_PROTOBUF = "serve-with-protobuf-rows"
_TEXT = ("id", "env", "label", "split", "uri", "sha256", "model_id", "event")
_PROVENANCE = pb.Provenance(model_id=MODEL_ID, model_sha256="0" * 64, bundle_id="b" * 24,
                            table_version=7, server_version="0.0.0",
                            space="center_l2(min_camera_rows=32)",
                            score_adaptation="camera(prior_rows=16)").SerializeToString()


def make_rows(count: int, seed: int = 0) -> list[Row]:
    """Seeded rows as a camera-trap backfill stores them: 20 cameras, bursts of 5 frames
    one second apart sharing an event, one capture time a burst."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIM), dtype=np.float32)
    start = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    return [Row(id=f"{i:064x}", vector=vectors[i], env=f"cam-{i % 20}", label="normal",
                split="train", uri=f"file:///archive/cam-{i % 20}/{i}.jpg",
                sha256=f"{i:064x}", event=f"burst-{i // 5}",
                timestamp=start + dt.timedelta(seconds=i // 5, microseconds=i % 5 * 250_000))
            for i in range(count)]


def protobuf_rows_chunk(batch: pa.RecordBatch, provenance: bytes) -> bytes:
    """The serialized ExportChunk of a record batch of store rows, built as protobuf
    messages (each Row added in place) and serialised by protobuf."""
    chunk = pb.ExportChunk()
    chunk.provenance.ParseFromString(provenance)
    rows = chunk.rows.rows
    fields = {name: [v or "" for v in batch.column(name).to_pylist()] for name in _TEXT}
    for name in ("timestamp", "ingested_at"):
        micros = batch.column(name).cast(pa.int64()).to_pylist()
        fields[name] = [None if m is None else
                        {"seconds": m // 1_000_000, "nanos": m % 1_000_000 * 1000}
                        for m in micros]
    if "vector" in batch.schema.names:
        flat = batch.column("vector").flatten().to_numpy(zero_copy_only=False)
        fields["vector"] = flat.reshape(batch.num_rows, -1).tolist()
    for i in range(batch.num_rows):
        rows.add(**{name: values[i] for name, values in fields.items()
                    if values[i] is not None})
    return chunk.SerializeToString()


class ProtobufRowsServer(LocalServer):
    """`envad serve` whose ROWS export encodes with `protobuf_rows_chunk`."""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "benchmarks.rows_export", SERVE_PROTOBUF,
                *self.serve_args()]


def serve_with_protobuf_rows(argv: list[str]) -> int:
    import envad.server.convert as convert
    from envad.client.cli import main

    convert.rows_chunk_bytes = protobuf_rows_chunk
    return main(argv)


def time_encoders(batches: list[pa.RecordBatch], rounds: int) -> dict[str, float]:
    """Best seconds of each encoder over every batch; checks they give the same bytes."""
    from envad.server.row_encoding import rows_chunk_bytes

    encoders = {"envad": rows_chunk_bytes, "protobuf": protobuf_rows_chunk}
    for batch in batches[:2]:
        assert rows_chunk_bytes(batch, _PROVENANCE) == protobuf_rows_chunk(batch, _PROVENANCE)
    best = dict.fromkeys(encoders, float("inf"))
    for _ in range(rounds):
        for name, encode in encoders.items():
            start = time.perf_counter()
            for batch in batches:
                encode(batch, _PROVENANCE)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def time_rpcs(work: Path, data: Path, rounds: int, rows: int) -> dict[str, float]:
    """Median seconds of a whole ROWS Export from each server, taken in turn."""
    model = build_resnet18_onnx(32, work / "models" / f"{MODEL_ID}.onnx", model_id=MODEL_ID)
    sides = {"envad": LocalServer, "protobuf": ProtobufRowsServer}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    servers = []
    try:
        for name, kind in sides.items():
            copy = work / f"data-{name}"
            shutil.copytree(data, copy)
            servers.append((name, kind(copy, model.parent).start()))
        for _, server in servers:                       # warm-up
            time_export(server.address, pb.EXPORT_FORMAT_ROWS)
        for round_ in range(rounds):
            log(f"round {round_ + 1}: a ROWS export from each server ...")
            for name, server in servers:
                took, count = time_export(server.address, pb.EXPORT_FORMAT_ROWS)
                assert count == rows, (name, count)
                seconds[name].append(took)
    finally:
        for _, server in servers:
            server.stop()
    return {name: statistics.median(values) for name, values in seconds.items()}


def main() -> None:
    from envad.server.store import EmbeddingStore

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envad-rows-export-") as tmp:
        work = Path(tmp)
        data = work / "data"
        log(f"writing {args.rows} x {DIM} rows ...")
        time_writer(data / "lancedb", make_rows(args.rows), 4096)
        batches = list(EmbeddingStore(data / "lancedb", MODEL_ID, DIM).iter_batches())
        encode = time_encoders(batches, args.rounds)
        del batches
        emit({"benchmark": "rows_encode", "rows": args.rows, "dim": DIM,
              "rounds": args.rounds,
              "envad_rows_per_s": round(args.rows / encode["envad"]),
              "protobuf_rows_per_s": round(args.rows / encode["protobuf"]),
              "ratio_envad_over_protobuf": round(encode["protobuf"] / encode["envad"], 2)})
        rpc = time_rpcs(work, data, args.rounds, args.rows)
        emit({"benchmark": "rows_export_rpc", "rows": args.rows, "dim": DIM,
              "rounds": args.rounds,
              "envad_s": round(rpc["envad"], 3), "protobuf_s": round(rpc["protobuf"], 3),
              "envad_rows_per_s": round(args.rows / rpc["envad"]),
              "protobuf_rows_per_s": round(args.rows / rpc["protobuf"]),
              "ratio_envad_over_protobuf": round(rpc["protobuf"] / rpc["envad"], 2)})


if __name__ == "__main__":
    if sys.argv[1:2] == [SERVE_PROTOBUF]:
        sys.exit(serve_with_protobuf_rows(sys.argv[2:]))
    main()
