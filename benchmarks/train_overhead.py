"""What `envad train` spends besides training: the fixed cost of a run, phase by phase.

    python -m benchmarks.train_overhead [--data DIR] [--rounds 3]

Runs `envad train` as a user does (a fresh process, `--quiet`) on PhotoDigits at 32 px
(generated into a temporary folder unless --data names one): `random` (no training
steps: the run is nothing but its fixed cost) and `erm --epochs 1`. The fixed cost is
the process's wall time minus the seconds of its training epochs; run.json's
`phase_seconds` split it into data (reading, decoding), model (building the algorithm
and its optimizer), validation, checkpoints, curves and export (with its parity check),
and the rest is start-up (the interpreter and imports). References measured in the same
run: a process that only imports torch (the floor of any torch program) and the ERM
epoch itself. Each figure is the median of `--rounds` runs. Target: fixed cost < 5 s.

It also times the decoding of the training images (`MultiEnvDataset.images`, which
decodes groups of large files on every core) against one thread decoding file after
file, as a run did before, on PhotoDigits' PNGs and on the same dataset re-encoded as
640x480 camera JPEGs (`train_decode` records).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import emit, log

ALGORITHMS = ("random", "erm")
SIZE = 32


def timed_process(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def one_run(data: Path, algorithm: str, out: Path) -> dict:
    wall = timed_process([sys.executable, "-m", "envad.client.cli", "train", "--data", str(data),
                          "--algorithm", algorithm, "--epochs", "1", "--size", str(SIZE),
                          "--out", str(out), "--quiet"])
    run = json.loads((out / "run.json").read_text())
    epochs = sum(e.get("seconds", 0.0) for e in run["epochs"] if e["epoch"] > 0)
    phases = dict(run["phase_seconds"])
    phases.pop("epochs", None)
    return {"wall_s": wall, "epochs_s": epochs, "fixed_s": wall - epochs,
            "startup_s": wall - epochs - sum(phases.values()), "phases": phases,
            "n_train": run["n_train"]}


def jpeg_copy(data: Path, out: Path, width: int = 640, height: int = 480) -> Path:
    """The dataset with every image re-encoded as a camera-sized JPEG (quality 88)."""
    import csv
    import shutil

    from PIL import Image

    out.mkdir(parents=True)
    shutil.copy(data / "ad_spec.json", out / "ad_spec.json")
    with open(data / "metadata.csv", newline="") as src, \
            open(out / "metadata.csv", "w", newline="") as dst:
        reader = csv.DictReader(src)
        writer = csv.DictWriter(dst, fieldnames=reader.fieldnames or [])
        writer.writeheader()
        for row in reader:
            path = Path(row["path"]).with_suffix(".jpg")
            (out / path).parent.mkdir(parents=True, exist_ok=True)
            with Image.open(data / row["path"]) as image:
                image.convert("RGB").resize((width, height), Image.Resampling.BICUBIC).save(
                    out / path, format="JPEG", quality=88)
            writer.writerow({**row, "path": str(path)})
    return out


def decode_times(data: Path, rounds: int) -> dict:
    """Median seconds to decode the training images at 32 px: `images` against one
    thread decoding file after file (interleaved rounds)."""
    from envad.server.images import decode_image
    from envad.training.data import load_dataset

    dataset = load_dataset(str(data))
    indices = dataset.indices("train", normal_only=True)
    ours, reference = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        dataset.images(indices, SIZE)
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        for i in indices:
            decode_image(dataset.read_bytes(int(i)), SIZE)
        reference.append(time.perf_counter() - started)
    size = sum(len(dataset.read_bytes(int(i))) for i in indices[:256]) / min(256, len(indices))
    return {"images": len(indices), "mean_file_bytes": round(size),
            "decode_s": round(statistics.median(ours), 3),
            "one_thread_s": round(statistics.median(reference), 3),
            "ratio_one_thread_over_decode": round(statistics.median(reference)
                                                  / statistics.median(ours), 3)}


def median_run(runs: list[dict]) -> dict:
    """The run with the median fixed cost (its phases stay consistent with its total)."""
    return sorted(runs, key=lambda r: r["fixed_s"])[len(runs) // 2]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="PhotoDigits folder (default: generate one)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            from envad.training.photodigits import generate

            data = generate(Path(tmp) / "photodigits", size=SIZE, seed=0, progress=False)
        fixed_costs(data, Path(tmp), args.rounds)
        for files, folder in (("PhotoDigits PNG", data),
                              ("640x480 JPEG", jpeg_copy(data, Path(tmp) / "jpeg"))):
            log(f"decoding {files} ...")
            emit({"benchmark": "train_decode", "files": files, "size": SIZE,
                  **decode_times(folder, args.rounds)})


def fixed_costs(data: Path, work: Path, rounds: int) -> None:
    """The `train_overhead` records: random and one-epoch ERM runs, interleaved."""
    results: dict[str, list[dict]] = {name: [] for name in ALGORITHMS}
    torch_import: list[float] = []
    for round_ in range(rounds):          # interleaved, so drift hits all alike
        torch_import.append(timed_process([sys.executable, "-c", "import torch"]))
        for name in ALGORITHMS:
            run = one_run(data, name, work / f"{name}-{round_}")
            log(f"round {round_} {name}: wall {run['wall_s']:.2f} s, fixed "
                f"{run['fixed_s']:.2f} s")
            results[name].append(run)
    import_torch_s = statistics.median(torch_import)
    erm_epoch_s = median_run(results["erm"])["epochs_s"]
    for name in ALGORITHMS:
        run = median_run(results[name])
        emit({"benchmark": "train_overhead", "algorithm": name, "size": SIZE,
              "n_train": run["n_train"], "rounds": rounds,
              "wall_s": round(run["wall_s"], 2), "epochs_s": round(run["epochs_s"], 2),
              "fixed_s": round(run["fixed_s"], 2), "startup_s": round(run["startup_s"], 2),
              "phases_s": {k: round(v, 2) for k, v in run["phases"].items()},
              "import_torch_s": round(import_torch_s, 2),
              "erm_epoch_s": round(erm_epoch_s, 2),
              "ratio_fixed_over_erm_epoch": round(run["fixed_s"] / erm_epoch_s, 3),
              "target": "fixed_s < 5"})


if __name__ == "__main__":
    main()
