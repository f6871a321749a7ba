"""The store's write and export paths against plain LanceDB, measured in one run.

Two JSON lines:
- store_write: `StoreWriter.write` (id check, Arrow conversion, append, FAISS mirror,
  the clock stopped once the mirror holds every row; an IVF training the writes started
  runs on in the index's thread and its remaining seconds are reported beside,
  `training_after_s`) of N x 512 rows in calls of
  `--chunk` rows ÷ `table.add` of the same rows, pre-built as Arrow tables, in the same
  chunks (ratio = lancedb seconds / writer seconds; 1.0 is
  parity, the target is >= 0.6);
- export_rows: Export through gRPC from a real `envad serve` in ROWS format (and in
  ARROW format) ÷ reading the same table with LanceDB (ratio = export seconds / read
  seconds; the target for ROWS is <= 1.5); the three are measured in `--rounds`
  interleaved rounds and each figure is the median. Beside them, in the same rounds,
  the messages of a ROWS export (same count, same sizes) sent pre-made by a bare gRPC
  server and received unparsed (benchmarks.bare_stream): what gRPC alone costs, with
  nothing read, encoded or parsed (`bare_stream_s`; `bare_ratio` = its seconds / read
  seconds, `rows_over_bare` = ROWS export seconds / its seconds).

    python -m benchmarks.store_write --rows 100000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import lancedb
import numpy as np

from benchmarks.bare_stream import MAX_MESSAGE, BareStream, identity
from benchmarks.common import emit, log
from benchmarks.models import build_resnet18_onnx
from envad.client.server_process import LocalServer
from envad.server.app import SERVICE_NAME
from envad.server.index import VectorIndex
from envad.server.store import EmbeddingStore, Row, make_schema, rows_table
from envad.server.writer import StoreWriter
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc

DIM = 512
MODEL_ID = "bench-resnet18-32"
EXPORT_METHOD = f"/{SERVICE_NAME}/Export"


def make_rows(count: int, seed: int = 0) -> list[Row]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIM), dtype=np.float32)
    return [Row(id=f"{i:064x}", vector=vectors[i], env=f"cam-{i % 20}", label="normal",
                split="train", uri=f"file:///archive/{i}.jpg", sha256=f"{i:064x}")
            for i in range(count)]


def time_writer(db_dir: Path, rows: list[Row], chunk: int) -> tuple[float, float, str]:
    """Seconds until every row is stored and in the index; then the seconds a switch to
    IVF started by the writes (in the index's background thread) still needed, and the
    index kind at the end."""
    store = EmbeddingStore(db_dir, MODEL_ID, DIM)
    writer = StoreWriter(store, VectorIndex(DIM), optimize_every=0)
    start = time.perf_counter()
    for i in range(0, len(rows), chunk):
        writer.write(rows[i:i + chunk])
    writer.index.flush()        # the FAISS mirror holds every row too
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    writer.index.wait_for_training()
    training = time.perf_counter() - start
    writer.close()
    assert store.count() == len(rows)
    return seconds, training, writer.index.kind


def time_lancedb_add(db_dir: Path, rows: list[Row], chunk: int) -> float:
    tables = [rows_table(rows[i:i + chunk], MODEL_ID, DIM) for i in range(0, len(rows), chunk)]
    table = lancedb.connect(str(db_dir)).create_table("plain", schema=make_schema(DIM))
    start = time.perf_counter()
    for part in tables:
        table.add(part)
    seconds = time.perf_counter() - start
    assert table.count_rows() == len(rows)
    return seconds


def time_export(address: str, export_format: pb.ExportFormat) -> tuple[float, int]:
    channel = grpc.insecure_channel(address, options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE)])
    stub = pb_grpc.AnomalyServiceStub(channel)
    start = time.perf_counter()
    rows = 0
    for chunk in stub.Export(pb.ExportRequest(format=export_format), timeout=600):
        rows += len(chunk.rows.rows) if export_format == pb.EXPORT_FORMAT_ROWS else 1
    seconds = time.perf_counter() - start
    channel.close()
    return seconds, rows


def export_message_sizes(address: str, export_format: pb.ExportFormat) -> list[int]:
    """The byte size of each message an export sends (received unparsed)."""
    channel = grpc.insecure_channel(address, options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE)])
    call = channel.unary_stream(EXPORT_METHOD,
                                request_serializer=pb.ExportRequest.SerializeToString,
                                response_deserializer=identity)
    sizes = [len(message) for message in call(pb.ExportRequest(format=export_format),
                                              timeout=600)]
    channel.close()
    return sizes


def time_table_read(db_dir: Path) -> float:
    table = lancedb.connect(str(db_dir)).open_table("emb_" + MODEL_ID.replace("-", "_"))
    start = time.perf_counter()
    read = table.search().limit(None).to_arrow()
    seconds = time.perf_counter() - start
    assert read.num_rows > 0
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds of the table read and both exports "
                             "(each figure is the median)")
    args = parser.parse_args()
    rows = make_rows(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log(f"lancedb table.add of {args.rows} x {DIM} rows ...")
        plain = time_lancedb_add(work / "plain", rows, args.chunk)
        log(f"StoreWriter.write of {args.rows} x {DIM} rows ...")
        data = work / "data"
        writer, training, kind = time_writer(data / "lancedb", rows, args.chunk)
        emit({"benchmark": "store_write", "rows": args.rows, "dim": DIM, "chunk": args.chunk,
              "writer_s": round(writer, 3), "lancedb_add_s": round(plain, 3),
              "ratio": round(plain / writer, 3), "target": ">= 0.6",
              "index_kind": kind, "training_after_s": round(training, 3)})
        del rows
        model = build_resnet18_onnx(32, work / "models" / f"{MODEL_ID}.onnx",
                                    model_id=MODEL_ID)
        reads, rows_s, arrow_s, bare_s = [], [], [], []
        with LocalServer(data, model.parent) as server:
            sizes = export_message_sizes(server.address, pb.EXPORT_FORMAT_ROWS)
            with BareStream(sizes, work) as bare:
                for _ in range(args.rounds):        # interleaved, so drift hits all four
                    reads.append(time_table_read(data / "lancedb"))
                    seconds, count = time_export(server.address, pb.EXPORT_FORMAT_ROWS)
                    assert count == args.rows
                    rows_s.append(seconds)
                    arrow_s.append(time_export(server.address, pb.EXPORT_FORMAT_ARROW_IPC)[0])
                    bare_s.append(bare.time_stream())
        read, export_rows, export_arrow, bare_stream = (
            statistics.median(x) for x in (reads, rows_s, arrow_s, bare_s))
        emit({"benchmark": "export_rows", "rows": args.rows, "rounds": args.rounds,
              "read_s": round(read, 3),
              "export_rows_s": round(export_rows, 3), "export_arrow_s": round(export_arrow, 3),
              "rows_ratio": round(export_rows / read, 3),
              "arrow_ratio": round(export_arrow / read, 3), "target": "rows_ratio <= 1.5",
              "bare_stream_s": round(bare_stream, 3), "messages": len(sizes),
              "message_bytes": sum(sizes), "bare_ratio": round(bare_stream / read, 3),
              "rows_over_bare": round(export_rows / bare_stream, 3)})


if __name__ == "__main__":
    main()
