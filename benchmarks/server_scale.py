"""The whole server as the store grows: restart to SERVING, memory, Fit, Score and Search.

For each store size a real `envad serve` (the server's default settings) is started on
a LanceDB store holding that many seeded synthetic 512-d rows (`benchmarks.scale`'s
clustered rows, 8 cameras, split `train`; the index kind the default thresholds give
that size is recorded) under the model id of a 32 px ResNet-18
encoder (random weights: speed does not depend on them). Measured, each in the same run:

- first start: process start to `envad.v1.AnomalyService` SERVING with no saved
  neighbour index (the server reads the table and builds it);
- Fit with the paper's eight detectors and the server's default sample cap, then
  one-image Score calls (a 640x480 JPEG naming a camera; 8 detectors, ensemble and 5
  neighbours) and Search calls (one stored vector, k=10): p50 over `--calls` calls;
- restart: stop, start again (the saved index is loaded): process start to SERVING;
- the server's resident memory (VmRSS after the restart's calls, VmHWM the peak of the
  first start).

Ratios against the run's first (smallest) size: Score p50, Search p50, restart seconds.

    python -m benchmarks.server_scale --rows 10000 100000 [1000000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import emit, log, percentile_ms, process_memory
from benchmarks.models import build_resnet18_onnx
from benchmarks.scale import DIM, vectors, write_store
from benchmarks.serving import camera_jpegs
from envad.client.library import make_channel
from envad.client.server_process import LocalServer
from envad.server import ann
from envad.server.config import DEFAULT_COMPRESSED_THRESHOLD, DEFAULT_IVF_THRESHOLD
from envad.server.detectors.registry import PAPER_DETECTORS
from envad.server.store import EmbeddingStore
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc

SIZE = 32
MODEL_ID = "bench-server-scale"
START_TIMEOUT_S = 1800.0


def server_memory(server: LocalServer) -> dict[str, int]:
    """The server process's memory (`benchmarks.common.process_memory`), in bytes."""
    assert server.process is not None, "the server is not running"
    return process_memory(server.process.pid)


def query_vector(rows: int) -> np.ndarray:
    """A seeded vector of the stores' distribution that a store of `rows` rows lacks."""
    return vectors(1, start=rows + 10_000_000)[0]


def timed_start(server: LocalServer) -> float:
    started = time.perf_counter()
    server.start(timeout=START_TIMEOUT_S)
    return time.perf_counter() - started


def call_p50(call, count: int) -> float:
    call()                                   # warm-up
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return percentile_ms(times, 50)


def measure_calls(stub, jpeg: bytes, query: np.ndarray, calls: int) -> dict[str, float]:
    score = pb.ScoreRequest(images=[pb.Image(data=jpeg, env="new-cam")], top_k=5)
    search = pb.SearchRequest(vector=pb.Vector(values=query.tolist()), k=10)
    return {"score_p50_ms": call_p50(lambda: stub.Score(score, timeout=120), calls),
            "search_p50_ms": call_p50(lambda: stub.Search(search, timeout=120), calls)}


def measure(rows: int, work: Path, model: Path, jpeg: bytes, calls: int) -> dict:
    data = work / f"data-{rows}"
    started = time.perf_counter()
    write_store(data / "lancedb", rows, MODEL_ID)
    log(f"server_scale: {rows:,} rows written in {time.perf_counter() - started:.1f} s")
    query = query_vector(rows)
    server = LocalServer(data, model.parent)
    reranked = EmbeddingStore(data / "lancedb", MODEL_ID, DIM).has_stable_row_ids
    record: dict = {"benchmark": "server_scale", "rows": rows, "size": SIZE,
                    "index_kind": ann.kind_for(rows, DEFAULT_IVF_THRESHOLD,
                                               DEFAULT_COMPRESSED_THRESHOLD,
                                               reranked=reranked)}
    try:
        record["first_start_s"] = timed_start(server)
        record["start_peak_rss_bytes"] = server_memory(server)["VmHWM"]
        with make_channel(server.address) as channel:
            stub = pb_grpc.AnomalyServiceStub(channel)
            started = time.perf_counter()
            fitted = stub.Fit(pb.FitRequest(detectors=PAPER_DETECTORS),
                              timeout=START_TIMEOUT_S)
            record["fit_s"] = time.perf_counter() - started
            record["fit_rows"] = fitted.n_samples
            record.update({f"first_{k}": v for k, v in
                           measure_calls(stub, jpeg, query, calls).items()})
        record["first_peak_rss_bytes"] = server_memory(server)["VmHWM"]
        server.stop()
        record["restart_s"] = timed_start(server)
        with make_channel(server.address) as channel:
            stub = pb_grpc.AnomalyServiceStub(channel)
            record.update(measure_calls(stub, jpeg, query, calls))
        memory = server_memory(server)
        record["rss_bytes"] = memory["VmRSS"]
        record["peak_rss_bytes"] = memory["VmHWM"]
    finally:
        server.stop()
    record["rss_bytes_per_row"] = record["rss_bytes"] / rows
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000],
                        help="store sizes, smallest first (the first is the reference)")
    parser.add_argument("--calls", type=int, default=100,
                        help="Score and Search calls per measurement")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the stores (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.work, prefix="envad-server-scale-") as tmp:
        work = Path(tmp)
        model = build_resnet18_onnx(SIZE, work / "models" / "encoder.onnx", model_id=MODEL_ID)
        jpeg = camera_jpegs(1, 640, 480)[0]
        first: dict | None = None
        for rows in sorted(args.rows):
            record = measure(rows, work, model, jpeg, args.calls)
            first = first or record
            for key in ("score_p50_ms", "search_p50_ms", "restart_s"):
                record[f"ratio_{key[:-3] if key.endswith('_ms') else key[:-2]}_over_first_size"] = (
                    record[key] / first[key])
            emit(record)


if __name__ == "__main__":
    main()
