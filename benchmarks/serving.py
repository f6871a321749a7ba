"""End-to-end service speed against raw ONNX Runtime, measured in one run.

BENCHMARK.md items 1, 2, 4 and 6, one JSON line each:
- serve_throughput: Score through gRPC (JPEG in, all detectors + ensemble + neighbours
  out, concurrent clients) ÷ raw ONNX Runtime on pre-decoded tensors, same batch size;
- one_image_score: one image per Score request from 1 client ÷ raw ONNX Runtime batch 1,
  and from 16 concurrent clients ÷ raw ONNX Runtime batch 32 (what the micro-batcher can
  reach when it coalesces them);
- score_latency: single-image Score p50/p99 ÷ raw single-image ONNX Runtime latency;
- ingest: Ingest throughput ÷ Embed throughput (both through gRPC);
- hardware_limit: the encoder's achieved GFLOP/s (ResNet-18 at 224 px = 1.82 GFLOP per
  image) as a fraction of this machine's sustained float32 GEMM rate.

    python -m benchmarks.serving --sizes 224 32
    python -m benchmarks.serving --sizes 32 --server-env ENVAD_BLAS_THREADS=2
"""

from __future__ import annotations

import argparse
import io
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks.common import best_time, emit, gemm_gflops, log, percentile_ms
from benchmarks.models import build_resnet18_onnx
from envad.client.library import make_channel
from envad.client.server_process import LocalServer
from envad.server.encoder import OnnxEncoder
from envad.server.images import decode_image
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc

RESNET18_GFLOP_224 = 1.82


def camera_jpegs(count: int, width: int, height: int, seed: int = 0) -> list[bytes]:
    """Smooth random JPEGs of camera-like content (compressible, like real photos)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        small = rng.integers(0, 256, size=(height // 16, width // 16, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)
        buffer = io.BytesIO()
        img.save(buffer, format="JPEG", quality=88)
        out.append(buffer.getvalue())
    return out


def raw_throughput(encoder: OnnxEncoder, batch: np.ndarray) -> float:
    return len(batch) / best_time(lambda: encoder.embed(batch), repeats=3, min_seconds=1.0)


def concurrent_score(stub, images: list[bytes], batch: int, clients: int, seconds: float) -> float:
    """Images/s scored by `clients` threads sending `batch`-image Score calls (each client
    its own images, so that requests differ as they do in production)."""
    requests = [pb.ScoreRequest(images=[pb.Image(data=images[(i * batch + j) % len(images)])
                                        for j in range(batch)]) for i in range(clients)]
    stub.Score(requests[0], timeout=300)
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def worker(i):
        while time.monotonic() < stop:
            stub.Score(requests[i], timeout=300)
            counts[i] += batch

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def one_image_score(stub, images: list[bytes], encoder_rates: dict[int, float],
                    seconds: float, size: int) -> list[dict]:
    """One-image Score requests from 1 and from 16 clients against raw ONNX Runtime at
    batch 1 and batch 32."""
    records = []
    for clients, raw_batch in ((1, 1), (16, 32)):
        served = concurrent_score(stub, images, 1, clients, seconds)
        raw = encoder_rates[raw_batch]
        records.append({"benchmark": "one_image_score", "size": size, "clients": clients,
                        "served_images_per_s": served, "raw_batch": raw_batch,
                        "raw_onnx_images_per_s": raw, "ratio_served_over_raw": served / raw})
    return records


def bench_size(size: int, workdir: Path, *, batch: int, clients: int, seconds: float,
               fit_rows: int, server_env: dict[str, str] | None = None) -> None:
    models, data = workdir / f"models-{size}", workdir / f"data-{size}"
    model_path = build_resnet18_onnx(size, models / f"resnet18-{size}.onnx")
    encoder = OnnxEncoder(model_path)
    jpeg_w, jpeg_h = (size * 4, size * 3) if size >= 224 else (640, 480)
    images = camera_jpegs(max(batch, fit_rows), jpeg_w, jpeg_h, seed=size)
    pixels = np.stack([decode_image(d, size) for d in images[:batch]])
    raw = raw_throughput(encoder, pixels)
    raw_rates = {n: raw_throughput(encoder, pixels[:n]) if n <= len(pixels) else
                 raw_throughput(encoder, np.concatenate([pixels] * (n // len(pixels) + 1))[:n])
                 for n in (1, 32)}
    single = pixels[:1]
    raw_latencies = []
    for _ in range(30):
        start = time.perf_counter()
        encoder.embed(single)
        raw_latencies.append(time.perf_counter() - start)
    del encoder
    with LocalServer(data, models, env=server_env) as server, \
            make_channel(server.address) as channel:
        stub = pb_grpc.AnomalyServiceStub(channel)
        items = [pb.IngestItem(image=pb.Image(data=d, id=f"fit-{i}", env=f"cam{i % 3}"),
                               split="train") for i, d in enumerate(images[:fit_rows])]
        start = time.perf_counter()
        summary = stub.Ingest(iter([pb.IngestRequest(items=items[i:i + batch])
                                    for i in range(0, len(items), batch)]), timeout=600)
        ingest_rate = summary.inserted / (time.perf_counter() - start)
        embed_request = pb.EmbedRequest(images=[pb.Image(data=d) for d in images[:fit_rows]])
        start = time.perf_counter()
        stub.Embed(embed_request, timeout=600)
        embed_rate = fit_rows / (time.perf_counter() - start)
        stub.Fit(pb.FitRequest(), timeout=600)
        served = concurrent_score(stub, images, batch, clients, seconds)
        one_image = one_image_score(stub, images, raw_rates, seconds, size)
        latencies = []
        one = pb.ScoreRequest(images=[pb.Image(data=images[0])])
        for _ in range(30):
            start = time.perf_counter()
            stub.Score(one, timeout=60)
            latencies.append(time.perf_counter() - start)
    emit({"benchmark": "serve_throughput", "size": size, "batch": batch, "clients": clients,
          "jpeg": f"{jpeg_w}x{jpeg_h}", "served_images_per_s": served,
          "raw_onnx_images_per_s": raw, "ratio_served_over_raw": served / raw,
          "server_env": server_env or {}})
    for record in one_image:
        emit({**record, "server_env": server_env or {}})
    emit({"benchmark": "score_latency", "size": size,
          "p50_ms": percentile_ms(latencies, 50), "p99_ms": percentile_ms(latencies, 99),
          "raw_p50_ms": percentile_ms(raw_latencies, 50),
          "raw_p99_ms": percentile_ms(raw_latencies, 99),
          "ratio_p50": percentile_ms(latencies, 50) / percentile_ms(raw_latencies, 50),
          "ratio_p99": percentile_ms(latencies, 99) / percentile_ms(raw_latencies, 99)})
    emit({"benchmark": "ingest", "size": size, "rows": fit_rows,
          "ingest_images_per_s": ingest_rate, "embed_images_per_s": embed_rate,
          "ratio_ingest_over_embed": ingest_rate / embed_rate})
    if size == 224:
        gemm = gemm_gflops()
        achieved = raw * RESNET18_GFLOP_224
        emit({"benchmark": "hardware_limit", "size": size, "gemm_gflops": gemm,
              "encoder_gflops": achieved, "fraction_of_gemm": achieved / gemm})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[224, 32])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fit-rows", type=int, default=64)
    parser.add_argument("--server-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="settings for the server process, e.g. ENVAD_BLAS_THREADS=2")
    args = parser.parse_args()
    server_env = dict(item.split("=", 1) for item in args.server_env)
    with tempfile.TemporaryDirectory(prefix="envad-bench-") as tmp:
        for size in args.sizes:
            log(f"serving benchmark at {size} px ...")
            bench_size(size, Path(tmp), batch=args.batch, clients=args.clients,
                       seconds=args.seconds, fit_rows=args.fit_rows, server_env=server_env)


if __name__ == "__main__":
    main()
