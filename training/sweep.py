"""`envad sweep`: per-algorithm hyperparameter sweeps, chosen by training-domain validation.

Each algorithm is trained at each of its sweep points (`SWEEP_POINTS`: its current
default first, then three or more others from the ranges DomainBed and WILDS search),
with the pipeline's training recipe otherwise (task, augmentation, schedule, epochs).
Per algorithm the point whose final model scores best on the training cameras' `val`
split is chosen: the classifier's accuracy for supervised algorithms (DomainBed's
training-domain validation, `IIDAccuracySelectionMethod`: the last checkpoint of each
run), the embedding's k-NN accuracy for self-supervised ones (they have no classifier).
The test cameras and every anomaly image are never read. A point replaces the default
only when it beats it by more than the sampling error of the difference of two accuracies
on the same number of val images (`tie_tolerance`): a default changes only on evidence,
not on a few val images. For the shipped pipeline's algorithm a committed `envad select`
that compared values of a hyperparameter decides it instead (envad/pipeline.py says why).

Runs are named as `envad evaluate` and `make demo` name them (`Pipeline.run_name`), so
a sweep pointed at their runs directory reuses their default-point runs, and an
interrupted sweep resumes. With `jobs` > 1 the runs are first trained that many at a
time in separate processes (several small runs share one GPU far better than one run
uses it), then read in order as if trained one by one. Writes `sweep.json` (every
point's metrics and the choice) and `sweep.md`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from envad.devices import resolve_device
from envad.errors import FailedPrecondition, InvalidInput
from envad.pipeline import DEFAULT_PIPELINE, Pipeline
from envad.training.algorithms import get
from envad.training.algorithms.base import make_hparams
from envad.training.data import load_dataset
from envad.training.run import TrainConfig, resolved_hparams, train
from envad.training.run_files import (
    last_val_metrics,
    read_run,
    training_seconds,
    write_text_atomically,
)
from envad.training.run_images import MAX_VAL
from envad.training.start_method import worker_context

#: epochs at the end of a run whose validation metric shows whether it plateaued
PLATEAU_EPOCHS = 5

#: Sweep points per algorithm: hyperparameter overrides on top of the pipeline's, the
#: algorithm's current default ({}) first. Sources of the ranges:
#: - lr: DomainBed's 10^U(-5, -3.5) for Adam on ResNets, around our default 1e-3 (ERM's
#:   sweep preferred 3e-3, `envad select` kept 1e-3 for the shipped pipeline);
#:   weight decay: DomainBed's 10^U(-6, -2) (0 is its ResNet default);
#: - IRM penalty: our default 0.1 (chosen by a sweep, irm.py) and its neighbours in
#:   DomainBed's 10^U(-1, 5), WILDS' iWildCam 1.0 among them (1e1 and 1e2 collapse the
#:   class task: irm.py);
#: - Fish meta_lr: DomainBed's choices {0.05, 0.1, 0.5};
#: - LISA: mixup alpha and the intra-label probability p_sel around the LISA paper's 2.0
#:   and 0.5;
#: - GroupDRO eta: DomainBed's 10^U(-3, -1);
#: - CORAL weight: DomainBed's 10^U(-1, 1);
#: - MoCo v3 / EA-MoCo: the InfoNCE temperature (moco-v3 uses 0.2 to 1.0; MoCo v3's
#:   default 0.2 and EA-MoCo's 1.0 were chosen by their sweeps) and lr.
SWEEP_POINTS: dict[str, tuple[dict[str, Any], ...]] = {
    "erm": ({}, {"lr": 3e-4}, {"lr": 3e-3}, {"weight_decay": 1e-4}),
    "irm": ({}, {"penalty_weight": 0.3}, {"penalty_weight": 1.0},
            {"penalty_weight": 3.0}),
    "fish": ({}, {"meta_lr": 0.05}, {"meta_lr": 0.1}, {"meta_lr": 0.25}),
    "lisa": ({}, {"alpha": 0.5}, {"p_sel": 0.25}, {"p_sel": 0.75}),
    "groupdro": ({}, {"eta": 1e-3}, {"eta": 3e-3}, {"eta": 1e-1}),
    "coral": ({}, {"penalty_weight": 0.1}, {"penalty_weight": 0.3},
              {"penalty_weight": 3.0}),
    "mocov3": ({}, {"temperature": 1.0}, {"temperature": 0.5}, {"lr": 3e-4}),
    "ea_mocov3": ({}, {"temperature": 0.2}, {"temperature": 0.5}, {"lr": 3e-4}),
}

SWEEP_JSON = "sweep.json"
SWEEP_MD = "sweep.md"


def point_label(point: dict[str, Any]) -> str:
    """`default`, or the overrides as `key=value` pairs (`lr=0.0003`)."""
    if not point:
        return "default"
    return ", ".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                     for key, value in sorted(point.items()))


def selection_metric(algorithm: str) -> str:
    """The run.json validation metric a sweep of `algorithm` is chosen on."""
    return "val_acc" if get(algorithm).supervised else "val_knn_acc"


def check_points(points: dict[str, tuple[dict[str, Any], ...]]) -> None:
    """Refuse a sweep that cannot say anything: an algorithm that does not train, a point
    naming a hyperparameter the algorithm lacks (`make_hparams` names it), two points
    that train the same hyperparameters (a point spelling out the default included), or
    a sweep whose first point is not the current default."""
    for algorithm, algorithm_points in points.items():
        try:
            cls = get(algorithm)
        except KeyError as error:
            raise InvalidInput(str(error.args[0])) from None
        if not cls.trains:
            raise InvalidInput(f"{algorithm} does not train: nothing to sweep")
        if not algorithm_points or algorithm_points[0]:
            raise InvalidInput(f"{algorithm}: the first sweep point must be the default {{}}")
        seen = set()
        for point in algorithm_points:
            try:
                resolved = make_hparams(cls.hparams_class, point)
            except (TypeError, ValueError) as error:
                raise InvalidInput(f"{algorithm}: sweep point {point!r}: {error}") from None
            # compared as trained: a point that spells out the default is the default
            key = json.dumps(dataclasses.asdict(resolved), sort_keys=True)
            if key in seen:
                raise InvalidInput(f"{algorithm}: sweep point {point_label(point)} trains "
                                   "the same hyperparameters as an earlier point")
            seen.add(key)


def tie_tolerance(default_accuracy: float, n_val: int) -> float:
    """The standard error of the difference of two accuracies near `default_accuracy`,
    each measured on `n_val` images: sqrt(2 p (1 - p) / n), p kept one image away from 0
    and 1. On PhotoDigits (480 val images, the default's accuracy about 0.97-0.98) it is
    0.8-0.9 points, about the spread of retraining one configuration: the shipped ERM
    recipe's val accuracy was 0.9667, 0.9750 and 0.9792 in three trainings of seed 0 on
    this project's machines, and 0.9625-0.9688 over seeds 0-2 (docs/results/)."""
    n = max(int(n_val), 1)
    p = min(max(float(default_accuracy), 1.0 / n), 1.0 - 1.0 / n) if n > 1 else 0.5
    return math.sqrt(2.0 * p * (1.0 - p) / n)


def choose(values: list[float], tolerance: float) -> int:
    """Index of the chosen point: the default (index 0) unless another beats it by more
    than `tolerance`, then the best (the first of equals)."""
    finite = [v if math.isfinite(v) else -math.inf for v in values]
    best = max(range(len(finite)), key=lambda i: (finite[i], -i))
    return 0 if finite[0] >= finite[best] - tolerance else best


@dataclass(frozen=True)
class SweepConfig:
    """What to sweep. `points` defaults to `SWEEP_POINTS` for `algorithms`; `epochs`
    to the pipeline's; `runs_dir` to OUT/runs. With several `seeds` each point is
    trained once per seed and judged on its mean (DomainBed averages its trials).
    `jobs`: how many runs train at once, each in its own process."""

    data: str
    out: Path
    algorithms: tuple[str, ...]
    pipeline: Pipeline = DEFAULT_PIPELINE
    size: int = 32
    seeds: tuple[int, ...] = (0,)
    epochs: int | None = None
    device: str = "cpu"
    runs_dir: Path | None = None
    points: dict[str, tuple[dict[str, Any], ...]] | None = None
    jobs: int = 1

    def sweep_points(self) -> dict[str, tuple[dict[str, Any], ...]]:
        table = self.points if self.points is not None else SWEEP_POINTS
        missing = [a for a in self.algorithms if a not in table]
        if missing:
            raise InvalidInput(f"no sweep points for {', '.join(missing)}; swept: "
                               f"{', '.join(sorted(table))}")
        chosen = {a: tuple(table[a]) for a in self.algorithms}
        check_points(chosen)
        return chosen

    @property
    def recipe(self) -> Pipeline:
        """The training recipe every point shares: the pipeline, `epochs` applied."""
        return dataclasses.replace(self.pipeline, epochs=self.epochs or self.pipeline.epochs)

    def point_pipeline(self, algorithm: str, point: dict[str, Any]) -> Pipeline:
        """The pipeline one point trains: the sweep's recipe, `algorithm`, the point's
        hyperparameters over the recipe's."""
        return dataclasses.replace(self.recipe, algorithm=algorithm,
                                   hparams={**self.pipeline.hparams, **point})

    def run_dir(self, pipeline: Pipeline, seed: int) -> Path:
        return Path(self.runs_dir or Path(self.out) / "runs") / pipeline.run_name(
            self.size, seed)


def run_record(run_dir: Path, metric: str) -> dict[str, Any]:
    """One finished run's validation record: the last epoch's metrics, the range of
    `metric` over the last PLATEAU_EPOCHS epochs, its training seconds."""
    run = read_run(run_dir)
    last = last_val_metrics(run)
    if metric not in last:
        raise InvalidInput(f"{run_dir}: no {metric} on the val split; a sweep needs the "
                           "training cameras' val images")
    tail = [e[metric] for e in run["epochs"][-PLATEAU_EPOCHS:]]
    return {"seed": run["config"]["seed"], "run_dir": str(run_dir),
            "hparams": run["hparams"], "val_acc": last.get("val_acc"),
            "val_knn_acc": last.get("val_knn_acc"),
            "tail": {"epochs": len(tail), "min": min(tail), "max": max(tail)},
            "train_seconds": round(training_seconds(run), 1)}


def point_record(point: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A point's record from its runs (one per seed): the mean of each metric over the
    seeds, the widest last-epochs range, the summed training seconds."""
    def mean(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return float(sum(values) / len(values)) if values else None
    return {"label": point_label(point), "point": point, "hparams": runs[0]["hparams"],
            "val_acc": mean("val_acc"), "val_knn_acc": mean("val_knn_acc"),
            "tail": {"epochs": min(r["tail"]["epochs"] for r in runs),
                     "min": min(r["tail"]["min"] for r in runs),
                     "max": max(r["tail"]["max"] for r in runs)},
            "train_seconds": round(sum(r["train_seconds"] for r in runs), 1),
            "runs": runs}


def train_config(config: SweepConfig, algorithm: str, point: dict[str, Any],
                 seed: int) -> TrainConfig:
    """The training run of one point at one seed."""
    pipeline = config.point_pipeline(algorithm, point)
    return TrainConfig.for_pipeline(pipeline, data=config.data,
                                    out=config.run_dir(pipeline, seed), size=config.size,
                                    seed=seed, device=config.device)


def train_point(config: SweepConfig, algorithm: str, point: dict[str, Any],
                progress: bool = True) -> dict[str, Any]:
    """Train (or reuse) one point's run per seed; its validation record."""
    runs = []
    for seed in config.seeds:
        run_dir = train(train_config(config, algorithm, point, seed), progress=progress,
                        resume=True)
        runs.append(run_record(run_dir, selection_metric(algorithm)))
    return point_record(point, runs)


def _train_in_worker(run: TrainConfig, threads: int) -> str:
    """One run in a worker process, on its share of the CPU threads."""
    torch.set_num_threads(threads)
    return str(train(run, progress=False, resume=True))


def train_in_parallel(config: SweepConfig, points: dict[str, tuple[dict[str, Any], ...]],
                      progress: bool = True) -> None:
    """Train every run of the sweep, `config.jobs` at a time in worker processes
    (`start_method`), the first seed of every point before the next seed, each worker
    on cpus // jobs torch threads. Finished runs are reused as in the serial sweep. Every
    run is attempted; the failures are then reported together."""
    runs = [train_config(config, algorithm, point, seed) for seed in config.seeds
            for algorithm, algorithm_points in points.items() for point in algorithm_points]
    threads = max(1, (os.cpu_count() or 1) // config.jobs)
    failures = []
    with concurrent.futures.ProcessPoolExecutor(
            max_workers=config.jobs, mp_context=worker_context()) as pool:
        futures = {pool.submit(_train_in_worker, run, threads): run for run in runs}
        done = concurrent.futures.as_completed(futures)
        for future in tqdm(done, total=len(futures), desc=f"sweep runs ({config.jobs} at a "
                           "time)", unit="run", disable=not progress):
            error = future.exception()
            if error is not None:
                failures.append(f"{futures[future].out}: {type(error).__name__}: {error}")
    if failures:
        raise FailedPrecondition(f"{len(failures)} of {len(runs)} sweep runs failed: "
                                 + "; ".join(failures))


def sweep_algorithm(config: SweepConfig, algorithm: str, points: tuple[dict[str, Any], ...],
                    n_val: int, progress: bool = True) -> dict[str, Any]:
    metric = selection_metric(algorithm)
    records = [train_point(config, algorithm, point, progress) for point in points]
    tolerance = tie_tolerance(records[0][metric], n_val * len(config.seeds))
    chosen = choose([r[metric] for r in records], tolerance)
    defaults = resolved_hparams(algorithm, dict(config.pipeline.hparams))
    return {"metric": metric, "n_val": n_val, "tie_tolerance": round(tolerance, 6),
            "points": records, "chosen": chosen,
            "chosen_label": records[chosen]["label"],
            "chosen_hparams": records[chosen]["hparams"],
            "changes_default": {k: v for k, v in records[chosen]["hparams"].items()
                                if defaults.get(k) != v}}


def run_sweep(config: SweepConfig, *, progress: bool = True) -> dict[str, Any]:
    """Sweep every algorithm of `config`; writes OUT/sweep.json and OUT/sweep.md after
    each algorithm and returns the summary."""
    points = config.sweep_points()
    if config.jobs < 1:
        raise InvalidInput(f"jobs must be at least 1, got {config.jobs}")
    n_val = min(len(load_dataset(config.data).indices("val", normal_only=True)), MAX_VAL)
    if not n_val:
        raise InvalidInput(f"{config.data} has no normal val images: a sweep chooses on "
                           "the training cameras' val split")
    if config.jobs > 1:
        train_in_parallel(config, points, progress)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "data": config.data, "size": config.size, "seeds": list(config.seeds),
        "recipe": dataclasses.replace(config.recipe, algorithm="*").to_json(),
        "device": resolve_device(config.device),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "algorithms": {}}
    for algorithm in config.algorithms:
        summary["algorithms"][algorithm] = sweep_algorithm(config, algorithm,
                                                           points[algorithm], n_val, progress)
        write_sweep(out, summary)
    return summary


def write_sweep(out: Path, summary: dict[str, Any]) -> None:
    write_text_atomically(out / SWEEP_JSON, json.dumps(summary, indent=2) + "\n")
    write_text_atomically(out / SWEEP_MD, sweep_markdown(summary))


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _per_seed(record: dict[str, Any], key: str) -> str:
    """The mean, followed by each seed's value when there are several."""
    runs = record.get("runs", [])
    if len(runs) < 2:
        return _percent(record[key])
    return f"{_percent(record[key])} ({' / '.join(_percent(r[key]) for r in runs)})"


def sweep_markdown(summary: dict[str, Any]) -> str:
    recipe = Pipeline.from_json({**summary["recipe"], "algorithm": "erm"})
    lines = ["# Hyperparameter sweep (training-domain validation)", "",
             f"Data `{summary['data']}`, {summary['size']} px, seeds "
             f"{', '.join(str(seed) for seed in summary['seeds'])} (each point's metrics: "
             "the mean over them), "
             f"device {summary['device']}; recipe: task {recipe.task}, augment "
             f"{recipe.augment}, aux {recipe.aux}, {recipe.epochs} epochs, "
             f"{recipe.hparams or 'default schedule'}. Chosen per algorithm on the "
             "training cameras' `val` split (classifier accuracy; k-NN accuracy for "
             "self-supervised algorithms), at the last epoch. A point replaces the "
             "default only when it beats it by more than the sampling error of the "
             "difference of two accuracies on the val images (sqrt(2p(1-p)/n) at the "
             "default's accuracy p). Test cameras are never read.", ""]
    for algorithm, result in summary["algorithms"].items():
        metric = result["metric"]
        lines += [f"## {algorithm}", "",
                  f"| point | val accuracy | val k-NN accuracy | {metric}, last epochs "
                  "(min-max) | training s | chosen |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for index, record in enumerate(result["points"]):
            tail = record["tail"]
            lines.append(
                f"| {record['label']} | {_per_seed(record, 'val_acc')} | "
                f"{_per_seed(record, 'val_knn_acc')} | {_percent(tail['min'])}-"
                f"{_percent(tail['max'])} ({tail['epochs']}) | {record['train_seconds']:.0f} "
                f"| {'**chosen**' if index == result['chosen'] else ''} |")
        change = result["changes_default"]
        lines += ["", f"Tie tolerance: {100 * result['tie_tolerance']:.2f} points "
                  f"({result['n_val']} val images x {len(summary['seeds'])} seed(s))."]
        lines += ["", f"Chosen: {result['chosen_label']}" + (
            f" (changes the default: {', '.join(f'{k}={v}' for k, v in change.items())})"
            if change else " (the current default)"), ""]
    return "\n".join(lines)
