"""Backfill throughput: `envad backfill` through a real `envad serve` (service engine)
against `--engine ray` on a local Ray with 1 and 2 embedding actors, for the same N
images, each into its own fresh local data dir. One JSON line per run: images/s and
the speed-up over the service engine and over one Ray actor, measured in the same run.

    python -m benchmarks.ray_backfill --images 2000 --size 64
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks.common import emit, log
from benchmarks.models import build_resnet18_onnx
from envad.client import EnvadClient
from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.ray_backfill import RayOptions, run_ray_backfill, target_for
from envad.client.server_process import LocalServer
from envad.client.sources import open_source

#: the engines measured, in this order: the service engine through a real server, then
#: Ray with 1 and 2 embedding actors (each ratio is against an earlier run of the same
#: invocation, on the same images)
ENGINES = ("service", "ray-1", "ray-2")


def make_archive(root: Path, images: int, size: int) -> Path:
    """A plain image tree of `images` distinct JPEGs over 4 cameras."""
    rng = np.random.default_rng(0)
    for i in range(images):
        folder = root / f"cam{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 255, (size * 2, size * 2, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"img{i:06d}.jpg", quality=90)
    return root


def service_run(archive: Path, models: Path, work: Path, images: int) -> float:
    server = LocalServer(work / "data", models).start()
    try:
        with EnvadClient(server.address) as client:
            started = time.monotonic()
            summary = run_backfill(client, open_source(archive), work / "ck.jsonl",
                                   BackfillOptions(batch_size=64), progress=False)
            elapsed = time.monotonic() - started
    finally:
        server.stop()
    assert summary.inserted == images, summary.format()
    return elapsed


def ray_run(archive: Path, model: Path, work: Path, images: int, workers: int,
            chunk_size: int) -> float:
    """Seconds of the backfill, Ray's start included (every run pays it)."""
    started = time.monotonic()
    summary = run_ray_backfill(open_source(archive), target_for(work / "data", model),
                               work / "ck.jsonl", BackfillOptions(),
                               RayOptions(num_cpus=workers, workers=workers, batch_size=64,
                                          chunk_size=chunk_size), progress=False)
    elapsed = time.monotonic() - started
    assert summary.inserted == images, summary.format()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--size", type=int, default=64, help="encoder input size")
    parser.add_argument("--chunk-size", type=int, default=RayOptions.chunk_size,
                        help="images per Lance commit of the Ray engine (its default)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_resnet18_onnx(args.size, root / "models" / f"resnet18-{args.size}.onnx")
        archive = make_archive(root / "archive", args.images, args.size)
        seconds: dict[str, float] = {}
        for name in ENGINES:
            work = root / name
            work.mkdir()
            seconds[name] = (service_run(archive, model.parent, work, args.images)
                             if name == "service" else
                             ray_run(archive, model, work, args.images, int(name[-1]),
                                     args.chunk_size))
            log(f"{name}: {args.images} images in {seconds[name]:.1f} s")
            emit({"benchmark": "ray_backfill", "engine": name, "images": args.images,
                  "size": args.size, "chunk_size": args.chunk_size,
                  "seconds": round(seconds[name], 2),
                  "images_per_s": round(args.images / seconds[name], 1),
                  "ratio_over_service": round(seconds["service"] / seconds[name], 3),
                  "ratio_over_one_worker": (round(seconds["ray-1"] / seconds[name], 3)
                                            if "ray-1" in seconds else None)})


if __name__ == "__main__":
    main()
