"""What `envad train` spends besides training: the fixed cost of a run, phase by phase.

    python -m benchmarks.train_overhead [--data DIR] [--rounds 3]

Runs `envad train` as a user does (a fresh process, `--quiet`) on PhotoDigits at 32 px
(generated into a temporary folder unless --data names one): `random` (no training
steps: the run is nothing but its fixed cost) with the decoded-image cache off (the
first run of a sweep, which decodes its images, ahead while it imports torch) and warm
(the runs after it), and `erm --epochs 1` with a warm cache; `random` with the cache
off, decoding ahead and not (`ENVAD_DECODE_AHEAD=0`, the reference), on the PNGs and on
the same images as 640x480 camera JPEGs; then both algorithms again as the runs after
the first that one process makes one after another (`envad sweep`, `select` and `evaluate` train in
process: start-up and imports are paid once). The fixed cost is
the process's wall time minus the seconds of its training epochs; run.json's
`phase_seconds` split it into data (reading, decoding), model (building the algorithm
and its optimizer), validation, checkpoints, curves and export (with its parity check),
and the rest is start-up (the interpreter and imports). References measured in the same
run: a process that only imports torch (the floor of any torch program) and the ERM
epoch itself. Each figure is the median of `--rounds` runs. Target: fixed cost < 5 s.

It also times the decoding of the training images (`MultiEnvDataset.images`, which
decodes groups of large files on every core) against one thread decoding file after
file, as a run did before, on PhotoDigits' PNGs and on the same dataset re-encoded as
640x480 camera JPEGs, and reading them from a warm decoded-image cache
(`train_decode` records); and the embedding of validation's 1,480 images through the
oneDNN inference copy against the channels-last copy it replaced and the encoder in
eval mode (`train_validation_embed` records).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import emit, log

ALGORITHMS = ("random", "erm")
SIZE = 32
PNG, JPEG = "PhotoDigits PNG", "640x480 JPEG"


def timed_process(args: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    return time.perf_counter() - started


def cache_environment(cache: Path, state: str, decode_ahead: bool = True) -> dict[str, str]:
    """The environment of a run whose decoded-image cache is `off` or kept in `cache`,
    decoding its images ahead (while it imports torch) or not."""
    env = {**os.environ, "ENVAD_CACHE_DIR": str(cache)}
    if state == "off":
        env["ENVAD_DECODED_CACHE_MB"] = "0"
    else:
        env.pop("ENVAD_DECODED_CACHE_MB", None)
    env["ENVAD_DECODE_AHEAD"] = "1" if decode_ahead else "0"
    return env


def one_run(data: Path, algorithm: str, out: Path, env: dict[str, str] | None = None) -> dict:
    wall = timed_process([sys.executable, "-m", "envad.client.cli", "train", "--data", str(data),
                          "--algorithm", algorithm, "--epochs", "1", "--size", str(SIZE),
                          "--out", str(out), "--quiet"], env)
    return fixed_cost(wall, out)


def fixed_cost(wall: float, run_dir: Path) -> dict:
    """A run's wall time split by its run.json: its training epochs, the rest (the fixed
    cost) by phase, and what no phase counts (start-up)."""
    run = json.loads((run_dir / "run.json").read_text())
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


def decode_times(data: Path, rounds: int, cache: Path) -> dict:
    """Median seconds to decode the training images at 32 px: `images` against one
    thread decoding file after file (interleaved rounds, the decoded-image cache off),
    and `images` reading them from a warm cache in `cache`."""
    from envad.server.images import decode_image
    from envad.training.data import load_dataset

    dataset = load_dataset(str(data))
    indices = dataset.indices("train", normal_only=True)
    ours, reference, cached = [], [], []
    os.environ["ENVAD_CACHE_DIR"] = str(cache)
    for _ in range(rounds):
        os.environ["ENVAD_DECODED_CACHE_MB"] = "0"
        started = time.perf_counter()
        dataset.images(indices, SIZE)
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        for i in indices:
            decode_image(dataset.read_bytes(int(i)), SIZE)
        reference.append(time.perf_counter() - started)
        os.environ.pop("ENVAD_DECODED_CACHE_MB")
        dataset.images(indices, SIZE)                  # fills the cache the first time
        started = time.perf_counter()
        dataset.images(indices, SIZE)
        cached.append(time.perf_counter() - started)
    size = sum(len(dataset.read_bytes(int(i))) for i in indices[:256]) / min(256, len(indices))
    decode_s, cached_s = statistics.median(ours), statistics.median(cached)
    return {"images": len(indices), "mean_file_bytes": round(size),
            "decode_s": round(decode_s, 3),
            "one_thread_s": round(statistics.median(reference), 3),
            "ratio_one_thread_over_decode": round(statistics.median(reference) / decode_s, 3),
            "cached_s": round(cached_s, 3),
            "ratio_decode_over_cached": round(decode_s / cached_s, 1)}


def validation_embedding(rounds: int, count: int = 1480) -> list[dict]:
    """Seconds to embed `count` images at 32 px (a run's 1,000 reference and 480 val
    images) through the inference copy validation uses (`inference_copy`: oneDNN's
    blocked layout or channels-last, whichever this CPU runs faster), against the other
    layout's copy and the encoder in eval mode (interleaved rounds, median)."""
    import numpy as np
    import torch

    from envad.training.models import (
        Encoder,
        EncoderConfig,
        blocked_layout_is_faster,
        inference_copy,
        to_float_nchw,
    )

    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(SIZE)).eval()
    images = np.random.default_rng(0).integers(0, 256, (count, SIZE, SIZE, 3), dtype=np.uint8)
    chosen = blocked_layout_is_faster()
    copies = {"inference copy, oneDNN blocked layout": True,
              "inference copy, channels-last": False}
    paths = {f"{name}{' (validation)' if blocked == chosen else ''}":
             (inference_copy(encoder, "cpu", blocked=blocked), not blocked)
             for name, blocked in copies.items()}
    paths["encoder in eval mode"] = (encoder, False)
    validation = next(name for name in paths if name.endswith("(validation)"))
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    with torch.no_grad():
        for _ in range(rounds + 1):                    # the first round warms up
            for name, (module, channels_last) in paths.items():
                started = time.perf_counter()
                for i in range(0, count, 256):
                    module(to_float_nchw(images[i:i + 256], channels_last=channels_last))
                seconds[name].append(time.perf_counter() - started)
    ours = statistics.median(seconds[validation][1:])
    return [{"benchmark": "train_validation_embed", "path": name, "size": SIZE,
             "images": count, "rounds": rounds, "seconds": round(statistics.median(s[1:]), 3),
             "ratio_over_validation": round(statistics.median(s[1:]) / ours, 2),
             "cpu_capability": torch.backends.cpu.get_cpu_capability()}
            for name, s in seconds.items()]


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
        datasets = {PNG: data, JPEG: jpeg_copy(data, Path(tmp) / "jpeg")}
        fixed_costs(datasets, Path(tmp), args.rounds)
        for files, folder in datasets.items():
            log(f"decoding {files} ...")
            emit({"benchmark": "train_decode", "files": files, "size": SIZE,
                  **decode_times(folder, args.rounds, Path(tmp) / f"cache-{folder.name}")})
        log("validation embedding ...")
        for record in validation_embedding(args.rounds):
            emit(record)


#: runs one process makes one after another, as `envad sweep`, `select` and `evaluate`
#: do: what the first pays, the later ones (the same settings, new run dirs) do not
IN_PROCESS = """
import json, sys, time
from pathlib import Path
from envad.training.run import TrainConfig, train
data, algorithm, out, runs = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
for i in range(runs):
    started = time.perf_counter()
    run_dir = train(TrainConfig(data=data, algorithm=algorithm, out=out / str(i), epochs=1,
                                size=int(sys.argv[5])), progress=False)
    print(json.dumps({"wall_s": time.perf_counter() - started, "run_dir": str(run_dir)}))
"""


def in_process_runs(data: Path, algorithm: str, out: Path, env: dict[str, str],
                    runs: int = 3) -> list[dict]:
    """Seconds of `runs` one-epoch runs made one after another by one process."""
    done = subprocess.run([sys.executable, "-c", IN_PROCESS, str(data), algorithm, str(out),
                           str(runs), str(SIZE)], check=True, capture_output=True, text=True,
                          env=env)
    finished = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [fixed_cost(run["wall_s"], Path(run["run_dir"])) for run in finished]


#: (files, algorithm, decoded-image cache, decoding ahead) per run of a round: the first
#: run of a sweep decodes its images (`off`), the later ones read them from the cache
#: (`warm`); the reference for decoding ahead decodes them after importing torch, as runs
#: did before, on PhotoDigits' PNGs and on camera-sized JPEGs of the same images
RUNS = ((PNG, "random", "off", True), (PNG, "random", "off", False),
        (PNG, "random", "warm", True), (PNG, "erm", "warm", True),
        (JPEG, "random", "off", True), (JPEG, "random", "off", False))


def fixed_costs(datasets: dict[str, Path], work: Path, rounds: int) -> None:
    """The `train_overhead` records: `RUNS` on `datasets` (by files), interleaved."""
    cache = work / "cache"
    one_run(datasets[PNG], "random", work / "fill-cache", cache_environment(cache, "warm"))
    results: dict[tuple[str, str, str, bool], list[dict]] = {run: [] for run in RUNS}
    torch_import: list[float] = []
    for round_ in range(rounds):          # interleaved, so drift hits all alike
        torch_import.append(timed_process([sys.executable, "-c", "import torch"]))
        for files, name, state, ahead in RUNS:
            run = one_run(datasets[files], name,
                          work / f"{files[:3]}-{name}-{state}-{ahead}-{round_}".replace(" ", ""),
                          cache_environment(cache, state, ahead))
            log(f"round {round_} {files} {name} (cache {state}, decoding ahead {ahead}): "
                f"wall {run['wall_s']:.2f} s, fixed {run['fixed_s']:.2f} s")
            results[(files, name, state, ahead)].append(run)
    later: dict[str, list[dict]] = {name: [] for name in ALGORITHMS}
    for round_ in range(rounds):
        for name in ALGORITHMS:
            runs = in_process_runs(datasets[PNG], name, work / f"in-process-{name}-{round_}",
                                   cache_environment(cache, "warm"))
            log(f"round {round_} {name}, runs after the first in one process: fixed "
                + ", ".join(f"{r['fixed_s']:.2f}" for r in runs[1:]) + " s")
            later[name] += runs[1:]
    import_torch_s = statistics.median(torch_import)
    erm_epoch_s = median_run(results[(PNG, "erm", "warm", True)])["epochs_s"]
    for (files, name, state, ahead), runs in results.items():
        emit_fixed_cost(name, median_run(runs), rounds, import_torch_s, erm_epoch_s,
                        decoded_cache=state, decode_ahead=ahead, n_train=runs[0]["n_train"],
                        **({"files": files} if files != PNG else {}))
    for name, runs in later.items():
        emit_fixed_cost(name, median_run(runs), rounds, import_torch_s, erm_epoch_s,
                        decoded_cache="warm", in_process=True)


def emit_fixed_cost(name: str, run: dict, rounds: int, import_torch_s: float,
                    erm_epoch_s: float, **labels) -> None:
    """One `train_overhead` record: a run's fixed cost by phase, with its references."""
    emit({"benchmark": "train_overhead", "algorithm": name, **labels, "size": SIZE,
          "rounds": rounds, "wall_s": round(run["wall_s"], 2),
          "epochs_s": round(run["epochs_s"], 2), "fixed_s": round(run["fixed_s"], 2),
          "startup_s": round(run["startup_s"], 2),
          "phases_s": {k: round(v, 2) for k, v in run["phases"].items()},
          "import_torch_s": round(import_torch_s, 2), "erm_epoch_s": round(erm_epoch_s, 2),
          "ratio_fixed_over_erm_epoch": round(run["fixed_s"] / erm_epoch_s, 3),
          "target": "fixed_s < 5"})


if __name__ == "__main__":
    main()
