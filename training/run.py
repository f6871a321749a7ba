"""`train(config)`: one pretraining run, from a dataset spec to an exported ONNX encoder.

A run dir holds `run.json` (config, per-epoch metrics, status), one checkpoint per
epoch (the newest `keep_checkpoints` are kept; the last epoch's holds the model without
its optimizer state, since no run resumes past its last epoch) and, when done,
`curves.png` (losses and validation accuracy per epoch) and `encoder.onnx`.
Deterministic for a seed on one machine; `resume=True` continues after the last
complete epoch and gives the same weights as an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from envad.devices import DEVICES, resolve_device
from envad.errors import FailedPrecondition, InvalidInput
from envad.pipeline import Pipeline
from envad.training import checkpoint as ckpt
from envad.training.algorithms import Algorithm, get, names
from envad.training.algorithms.base import AUX_LOSSES, make_hparams
from envad.training.augment import STYLE_AUGMENTS
from envad.training.batches import TASKS, EnvBalancedSampler, TrainData, class_targets
from envad.training.curves import training_curves
from envad.training.distributed import join, leave, mean_over_workers, shard_step
from envad.training.export import export_algorithm
from envad.training.models import EncoderConfig
from envad.training.multienv import MultiEnvDataset
from envad.training.run_files import (  # noqa: F401  (read_run: re-exported for callers of train)
    CURVES_FILE,
    ENCODER_FILE,
    VAL_METRICS,
    read_run,
    read_run_if_any,
    write_run,
)
from envad.training.run_images import (
    DecodeAhead,
    run_dataset,
    train_positions,
    validation_draws,
)
from envad.training.validation import validate
from envad.training.workers import run_workers, worker_device

log = logging.getLogger(__name__)


#: images per step unless a run says otherwise
DEFAULT_BATCH_SIZE = 64


@dataclass(frozen=True)
class TrainConfig:
    """One run's settings.

    epochs 5, batch_size 64: BENCHMARK.md's calibration and DomainBed's small-image batch.
    envs_per_step 4: environments per step (WILDS draws `n_groups_per_batch` groups per
    batch, 2 for iWildCam; 4 of PhotoDigits' 6 cameras gives 16 images per camera).
    hparams: overrides of the algorithm's hyperparameter dataclass.
    weights: optional local torchvision ResNet-18 state_dict to start from.
    small_stem: None = automatic (3x3 stem for size <= 64).
    keep_checkpoints: newest checkpoints kept (0 = all). knn_k: k of the val metric.
    model_id: the exported model's id (default ALGORITHM-DATASET-SIZEpx-eEPOCHS-sSEED).
    task: what supervised algorithms learn: "bucket" (the paper's normal_a vs normal_b)
    or "class" (every normal class label, as species labels in camera-trap data).
    augment: per-image style augmentation of supervised batches ("none" or "style",
    augment.STYLE_AUGMENTS); self-supervised algorithms make their own views.
    aux: self-supervised auxiliary loss of supervised algorithms ("none", or "rotation":
    predict which of 4 right-angle turns each image took, weight 0.5).
    exclude_envs, exclude_labels: cameras and content labels left out of the run
    entirely (pipeline selection trains on the rest and tests on what was left out).
    workers: processes training data-parallel (training/distributed.py), each on an
    equal shard of every environment's minibatch; how the run is computed, not what it
    computes, so not part of its identity: a run resumes with another worker count.
    """

    data: str
    algorithm: str
    out: Path
    size: int = 32
    epochs: int = 5
    batch_size: int = DEFAULT_BATCH_SIZE
    seed: int = 0
    device: str = "cpu"
    envs_per_step: int = 4
    hparams: dict[str, Any] = field(default_factory=dict)
    weights: str | None = None
    small_stem: bool | None = None
    keep_checkpoints: int = 2
    knn_k: int = 10
    model_id: str | None = None
    task: str = "bucket"
    augment: str = "none"
    aux: str = "none"
    exclude_envs: tuple[str, ...] = ()
    exclude_labels: tuple[str, ...] = ()
    workers: int = 1

    def check(self) -> None:
        """Raise InvalidInput naming the first bad setting."""
        if self.algorithm not in names():
            raise InvalidInput(f"unknown algorithm {self.algorithm!r}; known: "
                               f"{', '.join(names())}")
        if self.size < 8 or self.epochs < 1 or self.batch_size < 2 or self.envs_per_step < 1:
            raise InvalidInput("need size >= 8, epochs >= 1, batch_size >= 2, "
                               "envs_per_step >= 1")
        if self.aux not in AUX_LOSSES:
            raise InvalidInput(f"aux must be one of {', '.join(AUX_LOSSES)}, got {self.aux!r}")
        if self.task not in TASKS:
            raise InvalidInput(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.augment not in STYLE_AUGMENTS:
            raise InvalidInput(f"augment must be one of {', '.join(STYLE_AUGMENTS)}, got "
                               f"{self.augment!r}")
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise InvalidInput(f"device must be one of {', '.join(DEVICES)}, got "
                               f"{self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise FailedPrecondition("--device cuda but torch sees no CUDA device")
        self._check_workers()

    def _check_workers(self) -> None:
        per_env = self.batch_size // self.envs_per_step
        if self.workers < 1 or per_env % self.workers:
            raise InvalidInput(f"workers must be at least 1 and divide the images per "
                               f"environment of a step (batch_size // envs_per_step = "
                               f"{per_env}), got {self.workers}")
        if self.workers > 1 and self.device.startswith("cuda:"):
            raise InvalidInput("several workers on CUDA take one GPU each (cuda:0, cuda:1, "
                               "...): give --device cuda")
        if (self.workers > 1 and self.device.startswith("cuda")
                and self.workers > torch.cuda.device_count()):
            raise FailedPrecondition(f"{self.workers} workers on CUDA need as many GPUs; "
                                     f"torch sees {torch.cuda.device_count()}")

    @classmethod
    def for_pipeline(cls, pipeline: Pipeline, *, data: str, out: Path, size: int, seed: int,
                     device: str = "cpu", **settings: Any) -> TrainConfig:
        """The run that trains `pipeline`'s encoder (its algorithm, epochs, task,
        augmentation, auxiliary loss and hyperparameters) at `size` px and `seed`;
        `settings` are other fields (batch size, cameras and labels left out)."""
        return cls(data=data, algorithm=pipeline.algorithm, out=out, size=size,
                   epochs=pipeline.epochs, seed=seed, device=device, task=pipeline.task,
                   augment=pipeline.augment, aux=pipeline.aux,
                   hparams=dict(pipeline.hparams), **settings)

    def identity(self) -> dict:
        """Everything that determines the result (all fields but `out` and `workers`), as
        JSON data."""
        data = dataclasses.asdict(self)
        data.pop("out")
        data.pop("workers")
        return json.loads(json.dumps(data))


def same_config(stored: dict, wanted: dict) -> bool:
    """Two run identities are the same run; the dataset path may be spelled differently
    (relative or absolute) as long as it names the same directory."""
    def dataset(identity: dict) -> dict:
        return {**identity, "data": str(Path(identity.get("data", "")).resolve())}
    return dataset(stored) == dataset(wanted)


def resolved_hparams(algorithm: str, hparams: dict) -> dict:
    """Every hyperparameter `algorithm` trains with, given `hparams` (defaults filled
    in), as JSON data."""
    values = dataclasses.asdict(make_hparams(get(algorithm).hparams_class, hparams))
    return json.loads(json.dumps(values))


def trained_hparams(run_dir: Path) -> dict | None:
    """The hyperparameters a run was trained with (its run.json's); None when `run_dir`
    holds no run."""
    run = read_run_if_any(run_dir)
    if run is None:
        return None
    if "hparams" not in run:
        raise older_run(run_dir, "hparams")
    return run["hparams"]


def older_run(run_dir: Path, missing: str) -> FailedPrecondition:
    """The error for a run directory written by a development version before envad 0.1.0
    (its run.json lacks `missing`)."""
    return FailedPrecondition(f"{run_dir} holds a run of an unknown older format (its "
                              f"run.json has no {missing}): delete the run directory to "
                              "retrain it, or choose another output directory")


def stale_hparams(run_dir: Path, algorithm: str, hparams: dict) -> str:
    """The hyperparameters a run in `run_dir` was trained with that differ from what
    `hparams` resolve to for `algorithm` now, as "lr 0.001 (now 0.003)"; "" when none
    (or the run records none)."""
    trained = trained_hparams(run_dir)
    if trained is None:
        return ""
    wanted = resolved_hparams(algorithm, hparams)
    return ", ".join(f"{key} {trained[key]!r} (now {wanted.get(key, 'gone')!r})"
                     for key in sorted(trained) if wanted.get(key, object()) != trained[key])


def check_trained_hparams(run_dir: Path, algorithm: str, hparams: dict) -> None:
    """Refuse a cached run trained with other hyperparameters than `hparams` now
    resolve to (a default changed since it was trained): its identity names only the
    hyperparameters given, so the cache alone would reuse it. A hyperparameter the run
    does not record did not exist when it was trained; one given on the command line is
    in the identity already, and at its default it keeps the behaviour of before."""
    changed = stale_hparams(run_dir, algorithm, hparams)
    if not changed:
        return
    raise FailedPrecondition(f"{run_dir} was trained with other hyperparameters than "
                             f"{algorithm}'s now: {changed}; delete the run directory to "
                             "retrain it, or choose another runs directory")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def train(config: TrainConfig, *, progress: bool = True, resume: bool = False,
          ahead: DecodeAhead | None = None) -> Path:
    """Run (or resume, or return the cached result of) a training run; returns its dir.
    `ahead`: a child decoding this run's images since before torch was imported
    (`envad train`), whose groups the run takes instead of decoding them.
    `config.workers` > 1: this process is worker 0 of a data-parallel run
    (training/workers.py)."""
    config = dataclasses.replace(config, device=resolve_device(config.device))
    config.check()
    run_dir = Path(config.out)
    run = read_run_if_any(run_dir)
    if _finished(run, run_dir, config, resume):
        return run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    if config.workers == 1:
        train_worker(0, config, run, progress, ahead=ahead)
    else:
        run_workers(train_worker, (config, run, progress), config.workers, config.device,
                    ahead=ahead)
    return run_dir


def train_worker(rank: int, config: TrainConfig, run: dict | None, progress: bool,
                 ahead: DecodeAhead | None = None) -> None:
    """Worker `rank`'s part of a run (with one worker, all of it): the same data,
    sampler and algorithm in every worker, each training on its shard of every step;
    worker 0 alone validates and writes run.json, the checkpoints, the curves and the
    export."""
    main = rank == 0
    config = dataclasses.replace(config, device=worker_device(config.device, rank,
                                                              config.workers))
    run_dir = Path(config.out)
    phases = PhaseClock()
    seed_everything(config.seed)
    dataset, data = _train_data(config, progress and main, ahead)
    phases.lap("data")
    sampler = EnvBalancedSampler(data.envs, config.batch_size, config.envs_per_step,
                                 config.seed)
    cls = get(config.algorithm)
    algorithm = _new_algorithm(cls, config, sampler, data, len(data.env_names))
    start_epoch, epochs_log = _resume(run_dir, run, algorithm)
    algorithm.place(config.device)
    phases.lap("model")
    run = _running_record(config, dataset.name, data.env_names, data, epochs_log,
                          sampler.steps_per_epoch if cls.trains else 0)
    validation = _validation_sets(dataset, data, config) if main else None
    if main:
        write_run(run_dir, run)
    phases.lap("data")
    meta = {"dataset": dataset.name, "train_envs": data.env_names,
            "input_size": config.size, "seed": config.seed, "epochs": config.epochs}
    # `random` (trains nothing): one evaluation, no steps
    todo = (list(range(start_epoch, config.epochs + 1)) if cls.trains
            else [] if epochs_log else [0])
    if todo:
        algorithm.prepare(data, progress=progress and main)
        phases.lap("prepare")
    _train_epochs(algorithm, todo, sampler, data, config, progress and main, phases,
                  validation, run, meta)
    if not main:
        return
    training_curves(run_dir / CURVES_FILE, run["epochs"],
                    f"{config.algorithm} on {dataset.name}, seed {config.seed}")
    phases.lap("curves")
    parity = (validation[2][:32] if validation is not None and len(validation[2])
              else data.uint8(np.arange(min(32, len(data)))))
    # the algorithm as its newest checkpoint holds it, exported without reading it back
    _export(algorithm, meta, todo[-1] if todo else start_epoch - 1, run_dir, run, parity,
            config, phases)


def _train_data(config: TrainConfig, progress: bool, ahead: DecodeAhead | None
                ) -> tuple[MultiEnvDataset, TrainData]:
    """The run's dataset and its training images (decoded, or taken from `ahead`)."""
    dataset = run_dataset(config.data, config.exclude_envs, config.exclude_labels)
    dataset.decoded_ahead = ahead
    data = TrainData(dataset, train_positions(dataset), config.size,
                     dataset.envs("train"), task=config.task, progress=progress)
    return dataset, data


def _train_epochs(algorithm: Algorithm, todo: list[int], sampler: EnvBalancedSampler,
                  data: TrainData, config: TrainConfig, progress: bool, phases: PhaseClock,
                  validation: tuple | None, run: dict, meta: dict) -> None:
    """The epochs `todo`, on every worker (joined in one process group for the
    epochs when there are several); with `validation` (worker 0) each is validated,
    checkpointed and logged in run.json."""
    if config.workers > 1:
        join(algorithm)
    try:
        for epoch in todo:
            entry = _epoch(algorithm, sampler, data, epoch, config, progress, phases,
                           validation)
            if validation is None:
                continue
            run_dir = Path(config.out)
            ckpt.save_checkpoint(ckpt.checkpoint_path(run_dir, epoch), algorithm,
                                 epoch=epoch, meta=meta, resumable=epoch < config.epochs)
            ckpt.prune_checkpoints(run_dir, config.keep_checkpoints)
            run["epochs"].append(entry)
            write_run(run_dir, run)
            phases.lap("checkpoints")
    finally:
        if config.workers > 1:
            leave(algorithm)


def _running_record(config: TrainConfig, dataset_name: str, train_envs: list[str], data,
                    epochs_log: list[dict], steps_per_epoch: int) -> dict:
    """The run.json of a run in progress."""
    return {"config": config.identity(),
            "hparams": resolved_hparams(config.algorithm, config.hparams),
            "status": "running", "dataset": dataset_name,
            "train_envs": train_envs, "n_train": len(data), "epochs": epochs_log,
            "classes": data.class_names if config.task == "class" else ["normal_a", "normal_b"],
            "steps_per_epoch": steps_per_epoch}


def _new_algorithm(cls, config: TrainConfig, sampler, data, num_envs: int):
    """The run's algorithm, untrained, sized for the run's steps and classes."""
    total_steps = sampler.steps_per_epoch * config.epochs if cls.trains else 0
    return cls(EncoderConfig(config.size, config.small_stem, config.weights),
               config.hparams, num_envs=num_envs, total_steps=total_steps,
               seed=config.seed, num_classes=data.num_classes, augment=config.augment,
               aux=config.aux)


def _export(algorithm, meta: dict, last_epoch: int, run_dir: Path, run: dict,
            parity: np.ndarray, config: TrainConfig, phases: PhaseClock) -> None:
    """Export the encoder (checked on the `parity` images) and mark the run done."""
    report = export_algorithm(algorithm, meta, last_epoch, run_dir / ENCODER_FILE,
                              parity_images=parity, model_id=config.model_id)
    phases.lap("export")
    run.update(status="done", export={"file": ENCODER_FILE, "model_id": report.model_id,
                                      "max_abs_diff": report.max_abs_diff,
                                      "scale": report.scale},
               phase_seconds=phases.seconds())
    write_run(run_dir, run)


def _finished(run: dict | None, run_dir: Path, config: TrainConfig, resume: bool) -> bool:
    """True when `run_dir` holds the finished run of `config` (nothing to do); refuses a
    directory that holds another run, an unfinished one without `resume`, or other
    files."""
    if run is None:
        if run_dir.exists() and any(run_dir.iterdir()):
            raise FailedPrecondition(f"{run_dir} is not empty and holds no envad run")
        return False
    missing = sorted(config.identity().keys() - run["config"].keys())
    if missing:
        raise older_run(run_dir, ", ".join(missing))
    if not same_config(run["config"], config.identity()):
        raise FailedPrecondition(f"{run_dir} holds a run with a different config; "
                                 "choose another output directory")
    if run["status"] == "done" and (run_dir / ENCODER_FILE).is_file():
        check_trained_hparams(run_dir, config.algorithm, config.hparams)
        log.info("%s: finished run with this config, nothing to do", run_dir)
        return True
    if not resume:
        raise FailedPrecondition(f"{run_dir} holds an unfinished run; resume it "
                                 "(--resume) or choose another output directory")
    return False


def _resume(run_dir: Path, run: dict | None, algorithm) -> tuple[int, list[dict]]:
    """(first epoch to train, epochs logged so far): after the newest checkpoint of an
    existing run, whose training state `algorithm` takes; else from the start."""
    last = ckpt.latest_checkpoint(run_dir) if run is not None else None
    if last is None:
        return 1, []
    assert run is not None      # checkpoints are only looked for in an existing run
    payload = ckpt.load_checkpoint(last)
    if payload["args"] != algorithm.constructor_args():
        raise FailedPrecondition(f"{last} was written with other arguments")
    algorithm.load_training_state(payload["state"])
    log.info("resuming %s after epoch %d", run_dir, payload["epoch"])
    return payload["epoch"] + 1, [e for e in run["epochs"] if e["epoch"] <= payload["epoch"]]


def _epoch(algorithm, sampler, data, epoch: int, config: TrainConfig, progress: bool,
           phases: PhaseClock,
           validation: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None) -> dict:
    """Train one epoch (epoch 0: none, `random`) and validate (worker 0, which gets
    `validation`): its run.json entry."""
    started = time.monotonic()
    losses = _train_epoch(algorithm, sampler, data, epoch, config, progress) \
        if epoch > 0 else {}
    seconds = time.monotonic() - started
    phases.lap("epochs")
    if validation is None:
        return {}
    metrics = validate(algorithm, *validation, config.device, config.knn_k)
    phases.lap("validation")
    entry = {"epoch": epoch, "train": losses, **metrics, "seconds": round(seconds, 2)}
    if epoch > 0:
        entry["images_per_s"] = round(sampler.steps_per_epoch * sampler.per_env *
                                      sampler.envs_per_step / max(seconds, 1e-9), 1)
    if config.workers > 1:
        entry["workers"] = config.workers
    log.info("epoch %d: %s", epoch, _format(entry))
    return entry


class PhaseClock:
    """Wall seconds per phase of this call of `train` (run.json `phase_seconds`): `data`
    (reading and decoding), `model`, `prepare`, `epochs` (the updates), `validation`,
    `checkpoints`, `curves` and `export` (with its parity check); each `lap` adds the
    time since the previous one to a phase."""

    def __init__(self):
        self._last = time.monotonic()
        self._seconds: dict[str, float] = defaultdict(float)

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self._seconds[phase] += now - self._last
        self._last = now

    def seconds(self) -> dict[str, float]:
        return {phase: round(value, 3) for phase, value in self._seconds.items()}


def _train_epoch(algorithm: Algorithm, sampler: EnvBalancedSampler, data: TrainData,
                 epoch: int, config: TrainConfig, progress: bool) -> dict[str, float]:
    """One epoch of updates (this worker's shard of each step); returns the mean of each
    logged loss over the steps and the workers."""
    sums: dict[str, float] = defaultdict(float)
    steps = 0
    per_step = sampler.per_env * sampler.envs_per_step
    replicas = algorithm.replicas
    with tqdm(total=sampler.steps_per_epoch * per_step, unit="img", disable=not progress,
              desc=f"{config.algorithm} epoch {epoch}/{config.epochs}",
              dynamic_ncols=True) as bar:
        for step in sampler.epoch(epoch):
            batches = [data.batch(env, rows, config.device)
                       for env, rows in shard_step(step, replicas.rank, replicas.world_size)]
            logs = algorithm.update(batches)
            steps += 1
            for key, value in logs.items():
                sums[key] += float(value)
            bar.update(per_step)
            bar.set_postfix({k: f"{v / steps:.4f}" for k, v in sums.items()}, refresh=False)
    means = mean_over_workers({k: v / max(steps, 1) for k, v in sums.items()}, replicas)
    bad = [k for k, v in means.items() if not np.isfinite(v)]
    if bad:
        raise FloatingPointError(f"epoch {epoch}: non-finite training loss {bad}; lower the "
                                 "learning rate (--hparam lr=...)")
    return means


def _validation_sets(dataset: MultiEnvDataset, data: TrainData, config: TrainConfig):
    """Seeded subsets: training reference images and the val split's normals, with their
    targets (val images of a class absent from training are left out)."""
    rows, positions = validation_draws(dataset, len(data), set(data.class_names),
                                       config.task, config.seed)
    val = dataset.images(positions, config.size)
    if config.task == "class":
        val_y = class_targets([dataset.records[int(i)].label for i in positions],
                              data.class_names)
    else:
        val_y = dataset.buckets(positions)
    return data.uint8(rows), data.targets[rows], val, val_y


def _format(entry: dict) -> str:
    parts = [f"{k}={v:.4f}" for k, v in entry.get("train", {}).items()]
    parts += [f"{k}={entry[k]:.4f}" for k in VAL_METRICS if k in entry]
    parts += [f"{entry['seconds']:.1f}s"]
    if "images_per_s" in entry:
        parts.append(f"{entry['images_per_s']:.1f} img/s")
    return " ".join(parts)
