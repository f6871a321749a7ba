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
        results: dict[str, list[dict]] = {name: [] for name in ALGORITHMS}
        torch_import: list[float] = []
        for round_ in range(args.rounds):          # interleaved, so drift hits all alike
            torch_import.append(timed_process([sys.executable, "-c", "import torch"]))
            for name in ALGORITHMS:
                run = one_run(data, name, Path(tmp) / f"{name}-{round_}")
                log(f"round {round_} {name}: wall {run['wall_s']:.2f} s, fixed "
                    f"{run['fixed_s']:.2f} s")
                results[name].append(run)
    import_torch_s = statistics.median(torch_import)
    erm_epoch_s = median_run(results["erm"])["epochs_s"]
    for name in ALGORITHMS:
        run = median_run(results[name])
        emit({"benchmark": "train_overhead", "algorithm": name, "size": SIZE,
              "n_train": run["n_train"], "rounds": args.rounds,
              "wall_s": round(run["wall_s"], 2), "epochs_s": round(run["epochs_s"], 2),
              "fixed_s": round(run["fixed_s"], 2), "startup_s": round(run["startup_s"], 2),
              "phases_s": {k: round(v, 2) for k, v in run["phases"].items()},
              "import_torch_s": round(import_torch_s, 2),
              "erm_epoch_s": round(erm_epoch_s, 2),
              "ratio_fixed_over_erm_epoch": round(run["fixed_s"] / erm_epoch_s, 3),
              "target": "fixed_s < 5"})


if __name__ == "__main__":
    main()
