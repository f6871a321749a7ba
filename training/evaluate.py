"""The paper's Table 1 on any dataset: pretrainings x detectors, ROC-AUC on unseen cameras.

Per (algorithm, seed): train (or reuse the cached run), embed with the exported ONNX file
through the server's encoder, fit the detectors through the server's bundle code on the
training cameras' normal `train` rows only, score the `test` split (unseen cameras) and,
when the dataset has one, the `id_test` split (held-out instances from training cameras).
A second variant drops Stylist-selected dimensions first; its drop fraction is chosen on
`val` (training cameras), never on test. Each space step in `spaces` adds a variant
`space:NAME` scored as the server scores: test images arrive camera by camera, and a
camera-aware space adapts to each unseen camera as its images come. Given `weights`,
one more pretraining, FROZEN, is scored alike: those weights' encoder exported as it is,
trained on nothing (the paper's "Other dataset" column). Each finished (algorithm, seed)
is written to `OUT/results/` at once, so an interrupted evaluation resumes where it
stopped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.neighbors import KNeighborsClassifier
from tqdm import tqdm

from envad.arrival_orders import DEFAULT_ORDERS as ARRIVAL_ORDERS
from envad.arrival_orders import arrange
from envad.defaults import FIT_MAX_SAMPLES
from envad.errors import InvalidInput
from envad.pipeline import Pipeline
from envad.server.detectors import registry
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.detectors.stylist import kept_features, rank_features
from envad.server.encoder import OnnxEncoder
from envad.training.algorithms import names as algorithm_names
from envad.training.data import load_dataset
from envad.training.metrics import mean_per_camera_auc, per_camera_auc, roc_auc
from envad.training.pretrained import weights_digest
from envad.training.protocol import (
    ENSEMBLE,
    FROZEN,
    IDENTITY_DEFAULTS,
    VARIANTS,
    fit_indices,
    result_name,
    space_variant,
)
from envad.training.report import write_report
from envad.training.run import DEFAULT_BATCH_SIZE, TrainConfig, check_trained_hparams, train
from envad.training.run_files import (
    ENCODER_FILE,
    last_val_metrics,
    read_run,
    training_seconds,
    write_text_atomically,
)

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate; `runs_dir` defaults to OUT/runs (trained encoders are reused)."""

    data: str
    algorithms: tuple[str, ...]
    detectors: tuple[str, ...]
    seeds: tuple[int, ...]
    out: Path
    size: int = 32
    epochs: int = 5
    batch_size: int = DEFAULT_BATCH_SIZE
    device: str = "cpu"
    runs_dir: Path | None = None
    stylist_fractions: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5)
    max_fit: int = FIT_MAX_SAMPLES
    task: str = "bucket"
    augment: str = "none"
    aux: str = "none"
    hparams: dict = field(default_factory=dict)
    spaces: tuple[str, ...] = ()
    score_adaptation: str = "none"     # of the space variants (the paper's stay unadapted)
    #: arrival orders each test camera is also scored in (envad/arrival_orders.py)
    orders: tuple[str, ...] = ARRIVAL_ORDERS
    #: a torchvision ResNet-18 state-dict file: adds the FROZEN pretraining
    weights: str | None = None
    #: write the report's PNG plots (how the report is written, not what it holds)
    plots: bool = True

    @property
    def pretrainings(self) -> tuple[str, ...]:
        """The algorithms, and FROZEN when weights are given: the report's columns."""
        frozen = (FROZEN,) if self.weights and FROZEN not in self.algorithms else ()
        return tuple(self.algorithms) + frozen

    def identity(self) -> dict:
        """Settings that determine a run's results (for the resume cache); the training
        and space settings are left out at their defaults, so older results stay valid.
        The weights are FROZEN's alone: its results carry their digest (`job_identity`)."""
        data = dataclasses.asdict(self)
        for key in ("out", "runs_dir", "algorithms", "seeds", "device", "weights", "plots"):
            data.pop(key)
        # the detectors' own settings: results scored before a detector's default changed
        # are not these (scoring again costs seconds; training is reused)
        data["detector_settings"] = registry.settings_of(self.detectors)
        for key, default in IDENTITY_DEFAULTS.items():
            if data[key] == default:
                data.pop(key)
        return json.loads(json.dumps(data, default=str))

    def pipeline(self, algorithm: str) -> Pipeline:
        """The training part of the pipeline `algorithm` is evaluated with."""
        return Pipeline(algorithm=algorithm, task=self.task, augment=self.augment,
                        aux=self.aux, epochs=self.epochs, hparams=dict(self.hparams))

    def run_name(self, algorithm: str, seed: int) -> str:
        """The run directory's name: the pipeline's (`Pipeline.run_name`, every training
        setting spelled out, epochs included), plus the batch size when not the default."""
        batch = "" if self.batch_size == DEFAULT_BATCH_SIZE else f"-b{self.batch_size}"
        return self.pipeline(algorithm).run_name(self.size, seed) + batch


def embed(encoder: OnnxEncoder, dataset, indices: np.ndarray, batch: int = 256) -> np.ndarray:
    parts = [encoder.embed(dataset.images(indices[i:i + batch], encoder.input_size))
             for i in range(0, len(indices), batch)]
    return np.concatenate(parts) if parts else np.zeros((0, encoder.dim), np.float32)


def choose_stylist_fraction(X_fit: np.ndarray, fit_envs: np.ndarray, fit_buckets: np.ndarray,
                            X_val: np.ndarray, val_envs: np.ndarray, val_buckets: np.ndarray,
                            fractions: tuple[float, ...], k: int = 10) -> tuple[float, dict]:
    """Pick the drop fraction whose embeddings carry content best across cameras.

    Leave-one-camera-out on training cameras only: for each camera, a k-NN vote among the
    other cameras' `train` rows predicts the bucket of this camera's `val` rows. The
    fraction with the best mean accuracy wins (ties: the smaller fraction).
    """
    scores = {}
    bias = rank_features(X_fit, fit_envs)          # the same ranking for every fraction
    for fraction in fractions:
        kept = kept_features(bias, fraction)
        accuracies = []
        for camera in np.unique(val_envs):
            ref, query = fit_envs != camera, val_envs == camera
            knn = KNeighborsClassifier(n_neighbors=k).fit(X_fit[ref][:, kept], fit_buckets[ref])
            accuracies.append(float((knn.predict(X_val[query][:, kept])
                                     == val_buckets[query]).mean()))
        scores[fraction] = float(np.mean(accuracies))
    best = max(fractions, key=lambda f: (scores[f], -f))
    return best, scores


def _score_split(bundle, X: np.ndarray, labels: np.ndarray, envs: np.ndarray
                 ) -> tuple[dict, dict]:
    if bundle.space.camera_aware or bundle.score_adaptation.enabled:
        order = np.argsort(envs, kind="stable")       # camera by camera, as they arrive
        X, labels, envs = X[order], labels[order], envs[order]
        scores = bundle.score_stream(X, envs)
    else:
        scores = bundle.score(X)
    # each detector ranks by its adapted score (its raw score when the bundle does not
    # adapt scores to cameras)
    named = {**scores.adapted, ENSEMBLE: scores.ensemble}
    return {name: {"pooled": roc_auc(labels, s), "per_camera_mean": mean_per_camera_auc(
        labels, s, envs), "per_camera": per_camera_auc(labels, s, envs)}
        for name, s in named.items()}, named


def score_orders(bundle, X: np.ndarray, labels: np.ndarray, envs: np.ndarray,
                 orders: tuple[str, ...], seed: int) -> dict[str, dict]:
    """{order: {"pooled", "per_camera_mean"}} of the ensemble, each test camera's images
    sent in that arrival order (scored as a stream, the rows stored as they are scored),
    plus {"worst": {...}}: the lowest of each over the orders."""
    out: dict[str, dict] = {}
    for name in orders:
        rows = arrange(envs, labels, name, seed)
        scores = bundle.score_stream(X[rows], envs[rows]).ensemble
        out[name] = {"pooled": roc_auc(labels[rows], scores),
                     "per_camera_mean": mean_per_camera_auc(labels[rows], scores, envs[rows])}
    if out:
        out["worst"] = {key: min(v[key] for v in out.values())
                        for key in ("pooled", "per_camera_mean")}
    return out


def _run_dir(config: EvalConfig, algorithm: str, seed: int) -> Path:
    runs_dir = Path(config.runs_dir or Path(config.out) / "runs")
    if algorithm == FROZEN:
        return runs_dir / frozen_run_name(config, seed)
    return runs_dir / config.run_name(algorithm, seed)


def frozen_run_name(config: EvalConfig, seed: int) -> str:
    """FROZEN's run directory (and model id): named by the weights' digest, so other
    weights are never mistaken for these."""
    assert config.weights is not None           # FROZEN is scored only with weights
    return f"{FROZEN}-{weights_digest(config.weights)}-{config.size}px-s{seed}"


def job_identity(config: EvalConfig, identity: dict, algorithm: str) -> dict:
    """What a cached result of `algorithm` must have been scored with: the evaluation's
    identity, and for FROZEN the digest of its weights."""
    if algorithm != FROZEN or config.weights is None:
        return identity
    return {**identity, "weights_sha256": weights_digest(config.weights)}


def encoder_run(config: EvalConfig, algorithm: str, seed: int, progress: bool) -> Path:
    """Train (or reuse) the run whose exported encoder `algorithm` is scored with.
    FROZEN's run trains nothing: `random`'s run with the weights loaded, which exports
    them as they are, with torchvision's own 7x7 stem at every size so that every tensor
    of the file is used; the same input size as the other pretrainings."""
    out = _run_dir(config, algorithm, seed)
    if algorithm == FROZEN:
        run = TrainConfig(data=config.data, algorithm="random", out=out, size=config.size,
                          epochs=1, seed=seed, device=config.device, task=config.task,
                          weights=str(Path(str(config.weights)).resolve()),
                          small_stem=False, model_id=out.name)
    else:
        run = TrainConfig.for_pipeline(config.pipeline(algorithm), data=config.data,
                                       out=out, size=config.size, seed=seed,
                                       device=config.device, batch_size=config.batch_size)
    return train(run, progress=progress, resume=True)


def machine() -> dict:
    """Where the numbers came from (quoted in reports)."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"platform": platform.platform(), "processor": platform.machine(),
            "cpu_count": os.cpu_count(), "gpu": gpu, "torch": torch.__version__}


def training_summary(run_dir: Path) -> dict:
    """Training time and last validation metrics of a finished run (from its run.json)."""
    run = read_run(run_dir)
    return {"run_dir": str(run_dir), "train_seconds": round(training_seconds(run), 2),
            **last_val_metrics(run)}


def evaluate_run(config: EvalConfig, dataset, algorithm: str, seed: int,
                 progress: bool = True) -> tuple[dict, dict]:
    """Train/reuse one encoder, fit and score every detector.

    Returns the result record (JSON) and the test labels, cameras and plain scores
    (arrays for the .npz next to it).
    """
    started = time.monotonic()
    run_dir = encoder_run(config, algorithm, seed, progress)
    trained = time.monotonic()
    encoder = OnnxEncoder(run_dir / ENCODER_FILE)
    records = dataset.records
    fit_idx = fit_indices(dataset)
    val_idx = dataset.indices(split="val", normal_only=True)
    test_idx = dataset.indices(split="test")
    X_fit, X_val, X_test = (embed(encoder, dataset, idx) for idx in (fit_idx, val_idx, test_idx))
    fit_envs = np.array([records[i].env for i in fit_idx])
    test_labels = np.array([records[i].is_anomaly for i in test_idx], dtype=bool)
    test_envs = np.array([records[i].env for i in test_idx])
    result: dict[str, Any] = {
        "algorithm": algorithm, "seed": seed, "model_id": encoder.meta.model_id,
        "n_fit": len(fit_idx), "n_test": len(test_idx), "variants": {}}
    fraction: float = 0.0
    fraction_scores: dict[float, float] = {}
    if config.stylist_fractions and len(val_idx):
        fraction, fraction_scores = choose_stylist_fraction(
            X_fit, fit_envs, dataset.buckets(fit_idx), X_val,
            np.array([records[i].env for i in val_idx]), dataset.buckets(val_idx),
            config.stylist_fractions)
    result["stylist"] = {"fraction": fraction, "val_scores": {str(k): v for k, v in
                                                              fraction_scores.items()}}
    id_idx = dataset.indices(split="id_test")
    raw_scores = {}
    for variant, space, adaptation in _variants(config):
        drop = fraction if variant == "stylist" and fraction > 0 else None
        spec = FitSpec(detectors=tuple(config.detectors), seed=seed,
                       max_samples=config.max_fit, stylist_drop_fraction=drop,
                       model_id=encoder.meta.model_id, space=space,
                       score_adaptation=adaptation)
        bundle = fit_bundle(X_fit, spec, envs=fit_envs)
        ood, named = _score_split(bundle, X_test, test_labels, test_envs)
        entry = {"ood": ood, "orders": score_orders(bundle, X_test, test_labels, test_envs,
                                                    config.orders, seed)}
        if len(id_idx):
            entry["id"] = _score_id_test(bundle, encoder, dataset, id_idx)
        result["variants"][variant] = entry
        if variant == "plain":
            raw_scores = named
    result["training"] = training_summary(run_dir)
    result["seconds"] = {"train_call": round(trained - started, 2),
                         "evaluate": round(time.monotonic() - trained, 2)}
    result["machine"] = machine()
    return result, {"labels": test_labels, "envs": test_envs,
                    **{f"score:{k}": v for k, v in raw_scores.items()}}


def _score_id_test(bundle, encoder: OnnxEncoder, dataset, id_idx: np.ndarray) -> dict:
    """The bundle's scores of the training cameras' held-out instances (id_test)."""
    id_labels = np.array([dataset.records[i].is_anomaly for i in id_idx], dtype=bool)
    id_envs = np.array([dataset.records[i].env for i in id_idx])
    return _score_split(bundle, embed(encoder, dataset, id_idx), id_labels, id_envs)[0]


def _variants(config: EvalConfig) -> list[tuple[str, str, str]]:
    """(variant name, space step, score adaptation) of each bundle a run fits: plain
    (and Stylist), then one per extra space step."""
    variants = [(v, "raw", "none")
                for v in (VARIANTS if config.stylist_fractions else ("plain",))]
    variants += [(space_variant(s, config.score_adaptation), s, config.score_adaptation)
                 for s in config.spaces]
    return variants


def save_result(results_dir: Path, result: dict) -> Path:
    """Write one (algorithm, seed)'s result where a resumed evaluation finds it, whole
    or not at all (temporary file + rename)."""
    path = results_dir / f"{result_name(result['algorithm'], result['seed'])}.json"
    write_text_atomically(path, json.dumps(result, indent=1))
    return path


def check_pretrainings(config: EvalConfig) -> None:
    """InvalidInput naming an unknown algorithm, or FROZEN asked for without weights."""
    unknown = [a for a in config.pretrainings if a not in algorithm_names() and a != FROZEN]
    if unknown:
        raise InvalidInput(f"unknown algorithm(s) {unknown}; known: {algorithm_names()}")
    if FROZEN in config.pretrainings and not config.weights:
        raise InvalidInput(f"{FROZEN} scores given weights: pass --weights FILE|imagenet")
    if config.weights and not Path(config.weights).is_file():
        raise InvalidInput(f"weights file {config.weights} does not exist")


def run_evaluation(config: EvalConfig, *, progress: bool = True) -> Path:
    """Evaluate every (algorithm, seed), resuming finished ones; write the report."""
    check_pretrainings(config)
    out = Path(config.out)
    results_dir = out / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset(config.data)
    identity = config.identity()
    # every algorithm per seed first
    jobs = [(a, s) for s in config.seeds for a in config.pretrainings]
    results = []
    for algorithm, seed in tqdm(jobs, desc="evaluate", disable=not progress):
        path = results_dir / f"{result_name(algorithm, seed)}.json"
        wanted = job_identity(config, identity, algorithm)
        if path.is_file():
            cached = json.loads(path.read_text())
            if cached.get("config") == wanted:
                run_dir = _run_dir(config, algorithm, seed)
                if run_dir.is_dir() and algorithm != FROZEN:   # FROZEN trains nothing
                    # results of a run trained before a default changed are not these
                    check_trained_hparams(run_dir, algorithm, config.hparams)
                results.append(cached)
                continue
        result, scores = evaluate_run(config, dataset, algorithm, seed, progress)
        result["config"] = wanted
        np.savez_compressed(results_dir / f"{result_name(algorithm, seed)}.npz", **scores)
        save_result(results_dir, result)
        results.append(result)
    write_report(config, dataset, results, out)
    return out
