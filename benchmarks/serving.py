"""End-to-end service speed against raw ONNX Runtime, measured in one run.

BENCHMARK.md items 1, 2, 4 and 6, one JSON line each:
- serve_throughput: Score through gRPC (JPEG in, the paper's eight detectors + ensemble + neighbours
  out, concurrent clients, each image naming its camera; the server's default space step
  and score adaptation) ÷ raw ONNX Runtime on pre-decoded tensors, same batch size;
  each the best of `--rounds` measurements taken alternately (raw, served, raw, ...);
- one_image_score: one image per Score request from 1 client ÷ raw ONNX Runtime batch 1,
  and from 16 concurrent clients ÷ raw ONNX Runtime batch 32 (what the micro-batcher can
  reach when it coalesces them); with the paper's eight detectors, then again with the
  set a Fit naming no detector fits (the default pipeline's);
- one_image_floor: what one one-image Score cannot do without, each part timed alone in
  the same run: raw ONNX Runtime at batch 1, decoding the request's JPEG to the input
  size, and an empty call through the same server (gRPC health Check, through the
  server's interceptors); their sum bounds a one-image Score from below, and raw ÷ floor
  is the highest ratio to raw any served one-image path could reach here;
- one_image_cpu_floor: the same bound for 16 clients sending one image each, where the
  machine's cores, not one request's latency, are the limit: the raw reference's time
  per image (ONNX Runtime at batch 32 on every core) plus, over the core count, the CPU
  seconds that decoding spends per image and that one empty call from 16 concurrent
  clients costs client and server (all threads of both processes), which run on the
  same cores; their sum bounds the time per served image from below;
- score_latency: single-image Score p50/p99 ÷ raw single-image ONNX Runtime latency;
- ingest: Ingest throughput ÷ Embed throughput (both through gRPC);
- hardware_limit: the encoder's achieved GFLOP/s (ResNet-18 at 224 px = 1.82 GFLOP per
  image) as a fraction of this machine's sustained float32 GEMM rate.

    python -m benchmarks.serving --sizes 224 32
    python -m benchmarks.serving --sizes 32 --server-env ENVAD_BLAS_THREADS=2
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc
from PIL import Image

from benchmarks.common import best_time, emit, gemm_gflops, log, percentile_ms
from benchmarks.models import build_resnet18_onnx
from envad.client.library import make_channel
from envad.client.server_process import LocalServer
from envad.server.detectors.registry import PAPER_DETECTORS, default_fit_detectors
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


def store_and_fit(models: Path, data: Path, images: list[bytes],
                  detectors: Sequence[str] = ()) -> None:
    """Store `images` as training rows of three cameras through a real server and fit
    `detectors` (none named: the default set) on them, below the usual row minimum if need be;
    servers started on `data` later find both."""
    with LocalServer(data, models) as server, make_channel(server.address) as channel:
        stub = pb_grpc.AnomalyServiceStub(channel)
        items = [pb.IngestItem(image=pb.Image(data=d, id=f"fit-{i}", env=f"cam{i % 3}"),
                               split="train") for i, d in enumerate(images)]
        stub.Ingest(iter([pb.IngestRequest(items=items[i:i + 32])
                          for i in range(0, len(items), 32)]), timeout=600)
        stub.Fit(pb.FitRequest(allow_few_rows=True, detectors=list(detectors)), timeout=600)


def concurrent_score(stub, images: list[bytes], batch: int, clients: int, seconds: float) -> float:
    """Images/s scored by `clients` threads sending `batch`-image Score calls (each client
    its own images from a camera of its own, so that requests differ as they do in
    production and each camera's score statistics are updated, durably, as they are
    under the default score adaptation)."""
    requests = [pb.ScoreRequest(images=[pb.Image(data=images[(i * batch + j) % len(images)],
                                                 env=f"new-cam{i}")
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


def paired(raw: Callable[[], float], served: Callable[[], float], rounds: int
           ) -> tuple[float, float]:
    """Best served and best raw images/s over `rounds` alternating measurements: on a
    shared machine both sides then meet the same disturbances."""
    best_served = best_raw = 0.0
    for _ in range(rounds):
        best_raw = max(best_raw, raw())
        best_served = max(best_served, served())
    return best_served, best_raw


def one_image_rows(stub, images: list[bytes], raw_rate: Callable[[int], Callable[[], float]],
                   size: int, seconds: float, rounds: int, extra: dict
                   ) -> dict[int, tuple[float, float]]:
    """One image per Score from 1 client against raw batch 1, from 16 against batch 32;
    returns {clients: (served images/s, raw images/s)}."""
    rates = {}
    for n_clients, raw_batch in ((1, 1), (16, 32)):
        one, raw_one = paired(
            raw_rate(raw_batch),
            functools.partial(concurrent_score, stub, images, 1, n_clients, seconds), rounds)
        emit({"benchmark": "one_image_score", "size": size, "clients": n_clients,
              "served_images_per_s": one, "raw_batch": raw_batch,
              "raw_onnx_images_per_s": raw_one, "ratio_served_over_raw": one / raw_one,
              **extra})
        rates[n_clients] = (one, raw_one)
    return rates


def one_image_floor(channel, image: bytes, encoder: OnnxEncoder, size: int, rounds: int,
                    served_images_per_s: float, detectors: str) -> None:
    """The parts a one-image Score cannot do without, each the best of `rounds` timings
    taken in turn (raw batch 1, decode, empty call), against the 1-client served rate."""
    health = health_pb2_grpc.HealthStub(channel)
    pixels = decode_image(image, size)[None]
    parts = {"raw_batch1_ms": lambda: encoder.embed(pixels),
             "decode_ms": lambda: decode_image(image, size),
             "empty_call_ms": lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=10)}
    best = dict.fromkeys(parts, float("inf"))
    for _ in range(rounds):
        for name, call in parts.items():
            best[name] = min(best[name], 1000 * best_time(call, repeats=1, min_seconds=0.5))
    floor_ms = sum(best.values())
    served_ms = 1000 / served_images_per_s
    emit({"benchmark": "one_image_floor", "size": size, "detectors": detectors,
          **{name: round(ms, 3) for name, ms in best.items()},
          "floor_ms": round(floor_ms, 3), "served_ms": round(served_ms, 3),
          "rest_ms": round(served_ms - floor_ms, 3),
          "ceiling_ratio_over_raw": best["raw_batch1_ms"] / floor_ms,
          "ratio_served_over_raw": best["raw_batch1_ms"] / served_ms})


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_item(work: Callable[[], int], pid: int | None = None,
                 min_seconds: float = 2.0) -> tuple[float, float]:
    """CPU seconds per item of `work` (called until `min_seconds` have passed; each call
    returns how many items it did) spent by this process and by process `pid` if given."""
    started, own = time.perf_counter(), time.process_time()
    other = process_cpu_seconds(pid) if pid else 0.0
    items = 0
    while time.perf_counter() - started < min_seconds:
        items += work()
    own_spent = time.process_time() - own
    other_spent = process_cpu_seconds(pid) - other if pid else 0.0
    return own_spent / items, other_spent / items


def empty_calls(health, clients: int, seconds: float) -> int:
    """Empty health Checks from `clients` threads for `seconds`; returns how many."""
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        while time.monotonic() < stop:
            health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            counts[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts)


def one_image_cpu_floor(channel, server_pid: int, image: bytes, size: int, rounds: int,
                        served_images_per_s: float, raw_images_per_s: float, detectors: str,
                        clients: int = 16, raw_batch: int = 32) -> None:
    """What 16 clients sending one image each cannot do without, per image: the raw
    reference's own machine time per image (ONNX Runtime at batch 32 on every core),
    plus the CPU seconds of decoding and of one empty call from 16 concurrent clients
    (client and server), which share the same cores, over the core count. Each CPU
    figure is the least of `rounds` measurements taken in turn."""
    health = health_pb2_grpc.HealthStub(channel)

    def decode() -> int:
        decode_image(image, size)
        return 1

    parts = {"decode_cpu_ms": lambda: cpu_per_item(decode),
             "empty_call_cpu_ms": lambda: cpu_per_item(
                 lambda: empty_calls(health, clients, 0.5), server_pid)}
    best = dict.fromkeys(parts, (float("inf"), float("inf")))
    for _ in range(rounds):
        for name, measure in parts.items():
            best[name] = min(best[name], measure(), key=sum)
    cores = len(os.sched_getaffinity(0))    # Linux, as the /proc readings above
    spent = {name: 1000 * sum(pair) for name, pair in best.items()}
    raw_ms = 1000 / raw_images_per_s
    floor_ms = raw_ms + sum(spent.values()) / cores
    emit({"benchmark": "one_image_cpu_floor", "size": size, "detectors": detectors,
          "clients": clients, "raw_batch": raw_batch, "cores": cores,
          "raw_ms_per_image": round(raw_ms, 3),
          **{name: round(ms, 3) for name, ms in spent.items()},
          "empty_call_client_cpu_ms": round(1000 * best["empty_call_cpu_ms"][0], 3),
          "floor_ms_per_image": round(floor_ms, 3),
          "ceiling_images_per_s": round(1000 / floor_ms, 1),
          "served_images_per_s": round(served_images_per_s, 1),
          "raw_onnx_images_per_s": round(raw_images_per_s, 1),
          "ceiling_ratio_over_raw": raw_ms / floor_ms,
          "ratio_served_over_raw": served_images_per_s / raw_images_per_s})


def bench_size(size: int, workdir: Path, *, batch: int, clients: int, seconds: float,
               rounds: int, fit_rows: int, server_env: dict[str, str] | None = None) -> None:
    models, data = workdir / f"models-{size}", workdir / f"data-{size}"
    model_path = build_resnet18_onnx(size, models / f"resnet18-{size}.onnx")
    encoder = OnnxEncoder(model_path)
    jpeg_w, jpeg_h = (size * 4, size * 3) if size >= 224 else (640, 480)
    images = camera_jpegs(max(batch, fit_rows), jpeg_w, jpeg_h, seed=size)
    pixels = np.stack([decode_image(d, size) for d in images[:max(batch, 32)]])

    def raw_rate(n: int) -> Callable[[], float]:
        return lambda: n / best_time(lambda: encoder.embed(pixels[:n]), repeats=1,
                                     min_seconds=min(1.0, seconds))

    extra = {"server_env": server_env or {}, "rounds": rounds, "seconds_per_round": seconds}
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
        # the Score path is measured; a fit below the 100-row minimum is allowed
        stub.Fit(pb.FitRequest(allow_few_rows=True, detectors=PAPER_DETECTORS), timeout=600)
        served, raw = paired(raw_rate(batch),
                             lambda: concurrent_score(stub, images, batch, clients, seconds),
                             rounds)
        emit({"benchmark": "serve_throughput", "size": size, "batch": batch,
              "clients": clients, "jpeg": f"{jpeg_w}x{jpeg_h}", "served_images_per_s": served,
              "raw_onnx_images_per_s": raw, "ratio_served_over_raw": served / raw, **extra})
        one_image_rows(stub, images, raw_rate, size, seconds, rounds,
                       {**extra, "detectors": "+".join(PAPER_DETECTORS)})
        latencies, raw_latencies = [], []
        one_request = pb.ScoreRequest(images=[pb.Image(data=images[0], env="new-cam0")])
        for _ in range(40):          # alternating, so both meet the same load
            start = time.perf_counter()
            stub.Score(one_request, timeout=60)
            latencies.append(time.perf_counter() - start)
            start = time.perf_counter()
            encoder.embed(pixels[:1])
            raw_latencies.append(time.perf_counter() - start)
        # the same one-image calls against what a Fit naming no detector fits (the
        # default pipeline's set)
        stub.Fit(pb.FitRequest(allow_few_rows=True), timeout=600)
        default_set = "+".join(default_fit_detectors())
        rates = one_image_rows(stub, images, raw_rate, size, seconds, rounds,
                               {**extra, "detectors": default_set})
        one_image_floor(channel, images[0], encoder, size, rounds, rates[1][0], default_set)
        if Path("/proc/self/stat").exists() and server.process is not None:
            one_image_cpu_floor(channel, server.process.pid, images[0], size, rounds,
                                *rates[16], default_set)
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
    parser.add_argument("--seconds", type=float, default=4.0,
                        help="length of one served measurement (each is repeated --rounds "
                             "times, alternating with the raw reference; the best counts)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fit-rows", type=int, default=64)
    parser.add_argument("--server-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="settings for the server process, e.g. ENVAD_BLAS_THREADS=2")
    args = parser.parse_args()
    server_env = dict(item.split("=", 1) for item in args.server_env)
    with tempfile.TemporaryDirectory(prefix="envad-bench-") as tmp:
        for size in args.sizes:
            log(f"serving benchmark at {size} px ...")
            bench_size(size, Path(tmp), batch=args.batch, clients=args.clients,
                       seconds=args.seconds, rounds=args.rounds, fit_rows=args.fit_rows,
                       server_env=server_env)


if __name__ == "__main__":
    main()
