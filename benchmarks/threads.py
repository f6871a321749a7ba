"""Thread budget settings side by side: one-image Score through a real server, per setting.

The server's pools (ONNX Runtime intra-op, BLAS, FAISS OpenMP, decoding) share the
machine's cores (server/threads.py). Each setting below runs its own `envad serve` on the
same encoder, store and images, one after the other, round-robin over `--rounds` so that
other load on a shared machine falls on every setting alike; a setting's figure is its
best round. One JSON line per setting: one-image Score images/s from 1 client and from
16 clients, and p50 latency, each also as a ratio to the default setting's.

    python -m benchmarks.threads --size 32 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import emit, log, percentile_ms
from benchmarks.models import build_resnet18_onnx
from benchmarks.serving import camera_jpegs, concurrent_score, store_and_fit
from envad.client.library import make_channel
from envad.client.server_process import LocalServer
from envad.server.detectors.registry import PAPER_DETECTORS
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc

#: setting name -> server environment; "default" is what the server does unconfigured
CORES = str(os.cpu_count() or 1)
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "blas and faiss on every core": {"ENVAD_BLAS_THREADS": CORES, "ENVAD_FAISS_THREADS": CORES},
    "onnxruntime 1 thread": {"ENVAD_INTRA_OP_THREADS": "1"},
    "onnxruntime threads spin": {"ENVAD_INTRA_OP_SPINNING": "1"},
    "every pool 1 thread": {"ENVAD_THREADS": "1"},
}


def measure(models: Path, data: Path, env: dict[str, str], images: list[bytes],
            seconds: float) -> dict:
    with LocalServer(data, models, env=env) as server, \
            make_channel(server.address) as channel:
        stub = pb_grpc.AnomalyServiceStub(channel)
        one_client = concurrent_score(stub, images, 1, 1, seconds)
        sixteen = concurrent_score(stub, images, 1, 16, seconds)
        latencies = []
        request = pb.ScoreRequest(images=[pb.Image(data=images[0])])
        for _ in range(40):
            start = time.perf_counter()
            stub.Score(request, timeout=60)
            latencies.append(time.perf_counter() - start)
    return {"one_client_images_per_s": one_client, "sixteen_clients_images_per_s": sixteen,
            "p50_ms": percentile_ms(latencies, 50)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--fit-rows", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envad-threads-") as tmp:
        models, data = Path(tmp) / "models", Path(tmp) / "data"
        build_resnet18_onnx(args.size, models / f"resnet18-{args.size}.onnx")
        images = camera_jpegs(args.fit_rows, 640, 480, seed=args.size)
        store_and_fit(models, data, images, PAPER_DETECTORS)
        best: dict[str, dict] = {}
        for round_ in range(args.rounds):
            for name, env in SETTINGS.items():
                log(f"round {round_ + 1}: {name} ...")
                got = measure(models, data, env, images, args.seconds)
                kept = best.setdefault(name, got)
                for key, value in got.items():
                    better = min if key.endswith("_ms") else max
                    kept[key] = better(kept[key], value)
    base = best["default"]
    for name, figures in best.items():
        emit({"benchmark": "threads", "size": args.size, "setting": name,
              "server_env": SETTINGS[name], "rounds": args.rounds, **figures,
              **{f"{key}_over_default": figures[key] / base[key] for key in figures}})


if __name__ == "__main__":
    main()
