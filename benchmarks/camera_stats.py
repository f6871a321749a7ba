"""Per-camera running statistics: the cost of one durable update as cameras grow.

A camera-aware space (`center_l2`, `center_white_l2`) updates an unseen camera's running
mean with every scored batch that names its camera, before scoring it. The update is
made durable by a journal append (server/env_stats.py); the reference, measured in the
same run on the same state, is rewriting the whole state atomically per update (temp
file + fsync + rename), which is what a snapshot costs. One JSON line per camera count:
ms per one-row update through `EnvStatistics.update` and ms per snapshot write, and
their ratio (snapshot ÷ update: above 1, the journal is cheaper).

    python -m benchmarks.camera_stats --cameras 1 100 1000
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import best_time, emit, log
from envad.server.env_stats import EnvStatistics

DIM = 512


def measure(cameras: int, directory: Path) -> dict:
    stats = EnvStatistics(directory / f"stats-{cameras}.npz", DIM,
                          compact_every=10**9)           # no snapshot inside the timing
    rng = np.random.default_rng(0)
    for start in range(0, cameras, 256):
        names = [f"cam-{i:05d}" for i in range(start, min(start + 256, cameras))]
        stats.update(names, rng.normal(size=(len(names), DIM)))
    row = rng.normal(size=(1, DIM))
    update_s = best_time(lambda: stats.update(["cam-00000"], row))
    snapshot_s = best_time(stats.snapshot)
    stats.close()
    return {"benchmark": "camera_stats", "cameras": cameras, "dim": DIM,
            "update_ms": update_s * 1e3, "snapshot_ms": snapshot_s * 1e3,
            "ratio": snapshot_s / update_s}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cameras", type=int, nargs="+", default=[1, 100, 1000])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="envad-camstats-") as tmp:
        for cameras in args.cameras:
            record = measure(cameras, Path(tmp))
            log(f"{cameras} cameras: update {record['update_ms']:.3f} ms, snapshot "
                f"{record['snapshot_ms']:.3f} ms")
            emit(record)


if __name__ == "__main__":
    main()
