"""`envad select`: choose a pipeline on the training cameras alone.

The deployment question is "is this new content, on a camera never seen?". Each fold
asks it of the training cameras: one camera c and one normal class L are held out of
everything, an encoder is trained on the rest, the detectors are fitted on the rest's
normal `train` rows, and camera c's images (train and val splits) are scored with class
L as the anomaly. Camera c is unseen by the encoder and the detectors, class L is unseen
content: the test setting in miniature, with no test camera and no anomaly image.

Per training candidate, every space step and every detector set (each detector alone,
each subset's calibrated ensemble) is scored on the same folds; the pipeline with the
best `ranking_criterion` is chosen (DomainBed's training-domain validation, with the
held-out domain and class taken out of training, as its leave-one-domain-out variant):
the mean of its fold criterion (below) and its worst stream condition, so a pipeline is
chosen by how it does in its worst arrival order or anomaly mix, not only shuffled.
Rows within TIE_MARGIN of the best tie; among them the candidate that trains the fewest
epochs wins (the same evidence for less compute).

Score adaptation (server/detectors/score_adaptation.py) does not change a ranking within
one camera, only across cameras, so it is chosen on pooled query sets per fold: the
held-out camera's images with the other training cameras' `val` images (normal classes;
class L the anomaly), in a seeded interleaved order as a live stream sends them, as an
ingestion pipeline sees new and known cameras together. Adaptation assumes that cameras
send similar shares of anomalies, so besides the natural mix (POOLED_MIXES) two mixes
break that on purpose, subsampled per camera: the new camera with far more anomalies
than the known ones, and with far fewer. New content also arrives in runs, so the
natural mix, and the new-heavy one, are scored in every arrival order of
envad/arrival_orders.py (each chunk with the statistics of the rows stored before it, as
the server keeps them). For every (candidate, space, detector set), the option in
SCORE_ADAPTATION_CANDIDATES whose worst condition (the lowest mean ROC-AUC over the
folds of any mix or order) is highest is its adaptation ("none", then the shipped
default's adaptation, win ties within TIE_MARGIN), and that worst condition is its
worst stream condition, half of what it is ranked by.

Detectors are also fitted the way `envad scan` and a Fit on a backfilled archive fit
them: on rows that include the images being scored, new content among them. Per fold,
each archive set (ARCHIVE_MIXES) keeps the held-out camera's images at a small anomaly
share, optionally with each anomaly as near-identical frames: a burst that a camera
trap fires on one trigger (one event, as Fit groups frames by their timestamps), or the
same new content seen in separate events (a parked vehicle, a returning visitor); the
detectors are fitted on the other cameras' normal rows plus the archive set and score
the archive set the way Score scores fit rows (server/detectors/leave_out.py: each row
without its own event). A detector that treats a small cluster of new content as dense
(KDE with a narrow bandwidth) scores well on clean fits and fails here, so the
selection ranks by the mean of the two (`fold_criterion`): clean, and archive averaged
over its mixes.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import json
import logging
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from envad.arrival_orders import DEFAULT_ORDERS as ARRIVAL_ORDERS
from envad.arrival_orders import arrange
from envad.pipeline import COSINE, DEFAULT_PIPELINE, Pipeline
from envad.server.detectors import registry
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.detectors.exact import neighbour_scale
from envad.server.detectors.geometry import parse_space
from envad.server.detectors.leave_out import DEFAULT_EVENT_GAP_S, FitGroups
from envad.server.detectors.score_adaptation import (
    NONE,
    ScoreAdaptation,
    parse_score_adaptation,
)
from envad.server.encoder import OnnxEncoder
from envad.training.data import load_dataset
from envad.training.evaluate import embed
from envad.training.metrics import roc_auc_columns
from envad.training.run import ENCODER_FILE, TrainConfig, train
from envad.training.start_method import worker_context

log = logging.getLogger(__name__)
#: rows whose mean fold ROC-AUC is within this of the best tie: the candidate that trains
#: fewer epochs wins among them (retraining one configuration moves its mean by about
#: 0.015 on PhotoDigits' folds, docs/RESULTS.md, so a smaller gap is no evidence)
TIE_MARGIN = 0.005
SPACE_CANDIDATES = ("raw", "l2", "pca_l2", "center_l2", "style_l2:1", "style_l2:3",
                    "white_l2", "center_white_l2")
ENSEMBLE_PREFIX = "ensemble:"
SCORE_ADAPTATION_CANDIDATES = ("none", "camera:16", "camera:64", "median:16", "median:64",
                               "gated:16", "gated:64", "frozen:16", "frozen:64",
                               "frozen:8:256", "frozen:16:256", "frozen:32:256",
                               "frozen:16:128", "frozen:1:64", "frozen:4:64",
                               "frozen:16:64", "frozen:64:64", "frozen:4:32",
                               "gated:64:2", "gated:64:1.5", "gated:64:1", "gated:16:1.5")
#: pooled sets per fold: name -> (anomaly share of the held-out camera, of every other
#: camera), or None for every camera's natural share
POOLED_MIXES: dict[str, tuple[float, float] | None] = {
    "natural": None, "new-heavy": (0.5, 0.05), "new-light": (0.05, 0.5)}
#: the pooled mixes scored in every arrival order: the natural one, and the held-out
#: camera with half its images new content (a new site or a season: where order matters
#: most, since a run of new content that begins while a camera's statistics are still
#: being gathered joins them)
ORDERED_MIXES = ("natural", "new-heavy")


def order_set_name(mix: str, order: str) -> str:
    """The name of a pooled mix scored in an arrival order: the order's own name for the
    natural mix, `<mix> <order>` for the others."""
    return order if mix == "natural" else f"{mix} {order}"


#: every (mix, order) the selection scores, by name
ORDER_SETS: dict[str, tuple[str, str]] = {
    order_set_name(mix, order): (mix, order) for mix in ORDERED_MIXES
    for order in ARRIVAL_ORDERS}
#: archive sets per fold: name -> (anomaly share of the held-out camera's images, frames
#: per anomaly, whether an anomaly's frames are one event); the detectors are fitted on
#: the scored images too
ARCHIVE_MIXES: dict[str, tuple[float, int, bool]] = {
    "2%": (0.02, 1, True), "5%": (0.05, 1, True), "2% in bursts of 4": (0.02, 4, True),
    "2% seen in 4 events": (0.02, 4, False), "10% in bursts of 8": (0.10, 8, True)}
#: how archive sets are scored; a fold saved with another value is scored again
#: (2: each archive row scored without its own event, as Score scores fit rows, by KNN
#: and KDE only; 3: by every detector, the others cross-fitted, leave_out.py)
ARCHIVE_SCORING = 3
#: how far a burst's frames lie from their anomaly's embedding: this fraction of the
#: rows' median 5th-neighbour distance (frames of one trigger differ far less from each
#: other than from any other image)
BURST_JITTER = 0.1

#: the training candidates `envad select` compares by default (the paper's setting first)
DEFAULT_CANDIDATES = {
    "paper-erm": Pipeline(algorithm="erm", task="bucket", augment="none", epochs=5),
    "erm-class-style": Pipeline(algorithm="erm", task="class", augment="style", epochs=5,
                                hparams=COSINE),
    "groupdro-class-style": Pipeline(algorithm="groupdro", task="class", augment="style",
                                     epochs=5, hparams=COSINE),
    "erm-class-style-e10": Pipeline(algorithm="erm", task="class", augment="style",
                                    epochs=10, hparams=COSINE),
    "erm-class-style-e15": Pipeline(algorithm="erm", task="class", augment="style",
                                    epochs=15, hparams=COSINE),
    "erm-class-style-rotation-e5": Pipeline(algorithm="erm", task="class", augment="style",
                                            aux="rotation", epochs=5, hparams=COSINE),
    "erm-class-stylemix-e15": Pipeline(algorithm="erm", task="class", augment="style_mix",
                                       epochs=15, hparams=COSINE),
    "erm-class-style-cosinehead-e15": Pipeline(algorithm="erm", task="class", augment="style",
                                               epochs=15, hparams={**COSINE, "head": "cosine"}),
    "irm1-class-style-e15": Pipeline(algorithm="irm", task="class", augment="style", epochs=15,
                                     hparams={**COSINE, "penalty_weight": 1.0}),
    "erm-class-style-e30": Pipeline(algorithm="erm", task="class", augment="style",
                                    epochs=30, hparams=COSINE),
}


@dataclass(frozen=True)
class Fold:
    """What one fold holds out: a training camera and a normal class."""

    env: str
    label: str

    @property
    def name(self) -> str:
        return f"{self.env}~{self.label}"


def make_folds(dataset, n_folds: int, seed: int = 0) -> list[Fold]:
    """`n_folds` (camera, class) pairs, seeded; cameras and classes are used evenly."""
    envs = dataset.envs("train")
    train_normal = dataset.indices("train", normal_only=True)
    labels = sorted({dataset.records[int(i)].label for i in train_normal})
    if len(envs) < 3 or len(labels) < 3:
        raise ValueError("pipeline selection needs >= 3 training cameras and >= 3 normal "
                         f"classes; found {len(envs)} cameras and {len(labels)} classes")
    rng = np.random.default_rng([seed, 17])
    env_order, label_order = rng.permutation(envs), rng.permutation(labels)
    return [Fold(str(env_order[i % len(envs)]), str(label_order[i % len(labels)]))
            for i in range(n_folds)]


def detector_sets(names: list[str]) -> list[tuple[str, ...]]:
    """Every non-empty subset of the detectors, in registry order."""
    return [combo for size in range(1, len(names) + 1)
            for combo in itertools.combinations(names, size)]


@dataclass(frozen=True)
class QuerySet:
    """Embeddings to score, their cameras (in arrival order), which are anomalies and,
    optionally, each row's event (rows with one code are frames of one event; None:
    every row an event of its own)."""

    X: np.ndarray
    envs: np.ndarray
    positive: np.ndarray
    events: np.ndarray | None = None

    def event_codes(self) -> np.ndarray:
        """Each row's event code (0, 1, ...)."""
        return np.arange(len(self.X)) if self.events is None else self.events

    def take(self, rows: np.ndarray) -> QuerySet:
        """The rows at positions `rows`, in that order."""
        return QuerySet(self.X[rows], self.envs[rows], self.positive[rows],
                        None if self.events is None else self.events[rows])


def archive_fit(X_fit: np.ndarray, fit_envs: np.ndarray, archive: QuerySet
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What a Fit on the fit rows plus an archive set gets: the rows, their cameras, ids
    (the archive's rows last) and event codes (every fit row alone, the archive's
    events after them)."""
    rows = np.concatenate([X_fit, archive.X])
    envs = np.concatenate([fit_envs, archive.envs])
    codes = np.concatenate([np.arange(len(X_fit)), len(X_fit) + archive.event_codes()])
    return rows, envs, np.arange(len(rows)).astype(str), codes


def _scorer_keys(names: list[str], combos: list[tuple[str, ...]]) -> list[str]:
    """The scorers a fold is scored by: each detector, then each set of them."""
    return list(names) + [ENSEMBLE_PREFIX + "+".join(combo) for combo in combos]


def scorer_keys(names) -> list[str]:
    """The scorers of these detectors (in registry order): each alone, then each set."""
    return _scorer_keys(list(names), detector_sets(list(names)))


def _missing(names: list[str]) -> dict[str, float]:
    """`_scorer_aucs`'s keys, every AUC missing (NaN: left out of the criterion)."""
    return dict.fromkeys(scorer_keys(names), float("nan"))


def _scorer_aucs(names: list[str], scores, positive: np.ndarray) -> dict[str, float]:
    """{detector: AUC, 'ensemble:A+B': AUC, ...}: each detector by its adapted score (its
    raw score when the bundle does not adapt), each set by its mean calibrated score
    (every set's AUC from one ranking of all the sets' scores)."""
    sets = _detector_set_sums(tuple(names))
    columns = np.empty((len(positive), len(sets.keys)))
    for j, name in enumerate(names):
        columns[:, j] = scores.adapted[name]
    calibrated = np.column_stack([np.asarray(scores.calibrated[n], dtype=np.float64)
                                  for n in names])
    columns[:, len(names):] = sets.means(calibrated)
    aucs = roc_auc_columns(positive, columns)
    return dict(zip(sets.keys, aucs.tolist(), strict=True))


@dataclass(frozen=True)
class _SetSums:
    """How to sum every detector set's calibrated scores (`detector_sets` order): a set
    of s members is its prefix's sum (s - 1 members, computed before it) plus its last
    member's score, the additions np.mean makes over the members in order, done for all
    sets of one size in one array operation."""

    keys: list[str]                  # `_scorer_keys`: each detector, then each set
    levels: list[tuple[np.ndarray, np.ndarray]]   # per size: (prefix column, last member)
    sizes: np.ndarray                # members of each set

    def means(self, calibrated: np.ndarray) -> np.ndarray:
        """[n, sets] mean calibrated score of each set, from [n, detectors] scores."""
        level = calibrated
        sums = [level]
        for prefix, last in self.levels:
            level = level[:, prefix] + calibrated[:, last]
            sums.append(level)
        return np.concatenate(sums, axis=1) / self.sizes


@functools.cache
def _detector_set_sums(names: tuple[str, ...]) -> _SetSums:
    """The `_SetSums` of these detectors (built once per detector list)."""
    combos = detector_sets(list(names))
    position: dict[tuple[str, ...], int] = {}     # a set's column within its size
    levels: list[tuple[np.ndarray, np.ndarray]] = []
    for size in range(1, len(names) + 1):
        members = [c for c in combos if len(c) == size]
        position.update({c: i for i, c in enumerate(members)})
        if size > 1:
            levels.append((np.array([position[c[:-1]] for c in members]),
                           np.array([names.index(c[-1]) for c in members])))
    sizes = np.array([len(c) for c in combos], dtype=np.float64)
    return _SetSums(_scorer_keys(list(names), combos), levels, sizes)


def score_fold(X_fit: np.ndarray, fit_envs: np.ndarray, query: QuerySet,
               pooled: dict[str, QuerySet] | None = None, spaces=SPACE_CANDIDATES,
               seed: int = 0, adaptations=SCORE_ADAPTATION_CANDIDATES,
               archives: dict[str, QuerySet] | None = None,
               orders: dict[str, QuerySet] | None = None,
               detectors: tuple[str, ...] | None = None) -> dict[str, dict]:
    """{"scores": {space: {scorer: AUC}}} of one fold's held-out camera (`query`), by
    `detectors` (None: every registered one) and their sets; with
    `pooled` sets also {"pooled": {mix: {space: {adaptation: {scorer: AUC}}}}}; with
    `orders` (pooled sets in arrival orders, ORDER_SETS)
    also {"orders": {name: {space: {adaptation: {scorer: AUC}}}}}; with `archives` also
    {"archive": {mix: {space: {scorer: AUC}}}}, each archive set scored by detectors
    fitted on the fit rows plus itself."""
    names = list(selection_detectors(detectors))
    out: dict[str, dict] = {"scores": {}}
    # the fitted bundle measures an unseen camera's prior when an adaptation asks for it
    measured = next((a for a in adaptations if parse_score_adaptation(a).unseen_prior),
                    NONE)
    for space in spaces:
        bundle = fit_bundle(X_fit, FitSpec(space=space, seed=seed, detectors=tuple(names),
                                           score_adaptation=measured),
                            envs=fit_envs)
        bundle = bundle.adapting(ScoreAdaptation())      # `scores`: unadapted
        scores = bundle.score_stream(query.X, query.envs)
        out["scores"][space] = _scorer_aucs(names, scores, query.positive)
        for mix, archive in (archives or {}).items():
            if not archive.positive.any():   # a camera too small for the mix: no AUC
                out.setdefault("archive", {}).setdefault(mix, {})[space] = _missing(names)
                continue
            rows, envs, ids, codes = archive_fit(X_fit, fit_envs, archive)
            fitted = fit_bundle(rows, FitSpec(space=space, seed=seed, detectors=tuple(names)),
                                envs=envs, ids=ids,
                                groups=FitGroups.of_members(ids, codes, DEFAULT_EVENT_GAP_S))
            scores = fitted.score_stream(archive.X, archive.envs, ids=ids[len(X_fit):])
            out.setdefault("archive", {}).setdefault(mix, {})[space] = _scorer_aucs(
                names, scores, archive.positive)
        for sets, named in (("pooled", pooled), ("orders", orders)):
            for mix, queries in (named or {}).items():
                # the detectors run once; each adaptation re-scales their raw scores
                known = bundle.score_stream(queries.X, queries.envs)
                out.setdefault(sets, {}).setdefault(mix, {})[space] = {
                    adaptation: _scorer_aucs(names, bundle.adapting(
                        parse_score_adaptation(adaptation)
                    ).score_stream(queries.X, queries.envs, known=known), queries.positive)
                    for adaptation in adaptations}
    return out


def mix_rows(envs: np.ndarray, positive: np.ndarray, held_out: str,
             shares: tuple[float, float] | None, seed: int) -> np.ndarray:
    """Positions of a pooled set kept for a mix: all of them (None), or per camera the
    most rows that give it its anomaly share (`shares`: the held-out camera's, every
    other camera's), seeded, in the set's order. A camera without anomalies drops out of
    a mix."""
    if shares is None:
        return np.arange(len(envs))
    rng = np.random.default_rng([seed, 31])
    kept = []
    for env in np.unique(envs):
        share = shares[0] if env == held_out else shares[1]
        anomalies = np.flatnonzero((envs == env) & positive)
        normals = np.flatnonzero((envs == env) & ~positive)
        n_anomalies = min(len(anomalies), int(share / (1 - share) * len(normals)))
        n_normals = min(len(normals), int(n_anomalies * (1 - share) / share))
        kept += [rng.choice(anomalies, n_anomalies, replace=False),
                 rng.choice(normals, n_normals, replace=False)]
    return np.sort(np.concatenate(kept))


def in_bursts(query: QuerySet, burst: int, seed: int, one_event: bool = True) -> QuerySet:
    """The set with its anomalies as bursts of `burst` frames: len(anomalies) // burst of
    them (at least one), each repeated `burst` times, every frame its embedding plus
    Gaussian jitter of norm about BURST_JITTER x the rows' median 5th-neighbour distance;
    a burst's frames one event (`one_event`) or each an event of its own; normal rows
    unchanged, each its own event; rows in a seeded order. `burst` 1, or a set without
    anomalies (a camera too small for the mix's share: its archive value is left out of
    the criterion), returns the set as it is."""
    if burst <= 1 or not query.positive.any():
        return query
    rng = np.random.default_rng([seed, 37])
    anomalies = np.flatnonzero(query.positive)
    kept = anomalies[:max(1, len(anomalies) // burst)]
    sigma = BURST_JITTER * neighbour_scale(query.X, seed=seed) / np.sqrt(query.X.shape[1])
    frames = np.repeat(query.X[kept], burst, axis=0)
    frames = (frames + rng.normal(0.0, sigma, frames.shape)).astype(query.X.dtype)
    normals = ~query.positive
    X = np.concatenate([query.X[normals], frames])
    envs = np.concatenate([query.envs[normals], np.repeat(query.envs[kept], burst)])
    positive = np.concatenate([np.zeros(int(normals.sum()), bool), np.ones(len(frames), bool)])
    n_normal = int(normals.sum())
    frame_events = (np.repeat(np.arange(len(kept)), burst) if one_event
                    else np.arange(len(frames)))
    events = np.concatenate([np.arange(n_normal), n_normal + frame_events])
    order = rng.permutation(len(X))
    return QuerySet(X[order], envs[order], positive[order], events[order])


def archive_sets(query: QuerySet, held_out: str, seed: int) -> dict[str, QuerySet]:
    """A fold's archive sets (ARCHIVE_MIXES) drawn from its held-out camera's images."""
    sets = {}
    for mix, (share, burst, one_event) in ARCHIVE_MIXES.items():
        rows = mix_rows(query.envs, query.positive, held_out, (share, share), seed)
        sets[mix] = in_bursts(QuerySet(query.X[rows], query.envs[rows], query.positive[rows]),
                              burst, seed, one_event)
    return sets


def subsample(indices: np.ndarray, fit_rows: int | None, seed: int) -> np.ndarray:
    """At most `fit_rows` of `indices` (seeded, order kept); all of them when None."""
    if fit_rows is None or fit_rows >= len(indices):
        return indices
    rng = np.random.default_rng([seed, 23])
    return np.sort(rng.choice(indices, fit_rows, replace=False))


def train_fold(candidate: Pipeline, data: str, fold: Fold, runs_dir: Path, *, seed: int = 0,
               size: int = 32, device: str = "cpu", progress: bool = False) -> Path:
    """The fold's encoder (trained without its camera and class; a finished run is reused)."""
    return train(TrainConfig.for_pipeline(
        candidate, data=data, out=runs_dir / f"{candidate.training_name}-{fold.name}-s{seed}",
        size=size, seed=seed, device=device, exclude_envs=(fold.env,),
        exclude_labels=(fold.label,)),
        progress=progress, resume=True)


def fold_fit_indices(dataset, fold: Fold) -> np.ndarray:
    """The rows a fold fits its detectors on: the other cameras' normal `train` rows
    without the fold's class."""
    records = dataset.records
    return np.array([i for i in dataset.indices("train", normal_only=True)
                     if records[i].env != fold.env and records[i].label != fold.label])


def fold_query_indices(dataset, fold: Fold) -> np.ndarray:
    """The fold's queries: its camera's normal images (train and val); its class is the
    anomaly."""
    records = dataset.records
    return np.array([i for i in range(len(records)) if records[i].env == fold.env
                     and records[i].split in ("train", "val") and not records[i].is_anomaly])


def run_fold(candidate: Pipeline, data: str, fold: Fold, runs_dir: Path, *, seed: int = 0,
             size: int = 32, device: str = "cpu", progress: bool = False,
             spaces: tuple[str, ...] = SPACE_CANDIDATES, fit_rows: int | None = None,
             adaptations: tuple[str, ...] = SCORE_ADAPTATION_CANDIDATES,
             detectors: tuple[str, ...] | None = None) -> dict:
    """Train without the fold's camera and class, embed, score every space x detector of
    `detectors` (None: every registered one; fitted on at most `fit_rows` of the rest's
    normal train rows), the pooled sets under every score adaptation of `adaptations`."""
    detectors = selection_detectors(detectors)
    run_dir = train_fold(candidate, data, fold, runs_dir, seed=seed, size=size,
                         device=device, progress=progress)
    dataset = load_dataset(data)
    records = dataset.records
    fit_idx = subsample(fold_fit_indices(dataset, fold), fit_rows, seed)
    query_idx = fold_query_indices(dataset, fold)
    seen_idx = np.array([i for i in range(len(records)) if records[i].env != fold.env
                         and records[i].split == "val" and not records[i].is_anomaly])
    pooled_idx = np.concatenate([query_idx, seen_idx])
    pooled_idx = pooled_idx[np.random.default_rng([seed, 29]).permutation(len(pooled_idx))]
    encoder = OnnxEncoder(run_dir / ENCODER_FILE)

    def query_set(indices: np.ndarray) -> QuerySet:
        return QuerySet(embed(encoder, dataset, indices),
                        np.array([records[i].env for i in indices]),
                        np.array([records[i].label == fold.label for i in indices]))
    query, pooled = query_set(query_idx), query_set(pooled_idx)
    mixes = {}
    for mix, shares in POOLED_MIXES.items():
        rows = mix_rows(pooled.envs, pooled.positive, fold.env, shares, seed)
        mixes[mix] = QuerySet(pooled.X[rows], pooled.envs[rows], pooled.positive[rows])
    archives = archive_sets(query, fold.env, seed)
    orders = {name: mixes[mix].take(arrange(mixes[mix].envs, mixes[mix].positive, order,
                                             seed))
              for name, (mix, order) in ORDER_SETS.items()}
    scored = score_fold(embed(encoder, dataset, fit_idx),
                        np.array([records[i].env for i in fit_idx]), query, mixes,
                        spaces=spaces, seed=seed, adaptations=adaptations,
                        archives=archives, orders=orders, detectors=detectors)
    return {"fold": {"env": fold.env, "label": fold.label}, "detector_settings":
            registry.settings_of(detectors), "n_fit": len(fit_idx),
            "n_query": len(query_idx), "n_positive": int(query.positive.sum()),
            "n_pooled": {mix: len(q.envs) for mix, q in mixes.items()},
            "n_archive": {mix: [len(a.envs), int(a.positive.sum())]
                          for mix, a in archives.items()},
            "archive_scoring": ARCHIVE_SCORING, **scored}


def choosable_scorers(single_means: dict[str, float]) -> list[str]:
    """The detector sets a selection may pick: each detector alone, the ensemble of all,
    and the ensembles of the 2, 3 and 4 detectors with the best mean alone (a small
    family, so that choosing among every subset on a few folds does not overfit them)."""
    names = [n for n in registry.names() if n in single_means]
    ranked = sorted(names, key=lambda n: -single_means[n])
    sets = [tuple(sorted(ranked[:m], key=names.index)) for m in (2, 3, 4)]
    return (list(names) + [ENSEMBLE_PREFIX + "+".join(names)]
            + [ENSEMBLE_PREFIX + "+".join(s) for s in sets])


def clean_and_archive(clean: float, archive: list[float]) -> float:
    """The selection criterion from a clean ROC-AUC and the archive sets' ROC-AUCs: their
    mean halves, the archive ones averaged first; sets that held no anomaly (NaN) are
    left out, and without any the clean value stands alone."""
    finite = [v for v in archive if np.isfinite(v)]
    return 0.5 * (clean + float(np.mean(finite))) if finite else clean


def fold_criterion(fold: dict, space: str, key: str) -> float:
    """What the selection ranks one fold by, for a (space, scorer): the mean of its clean
    ROC-AUC and its archive ROC-AUC averaged over the archive mixes (the clean value alone
    for a result without archive sets, or whose sets held no anomaly)."""
    return clean_and_archive(fold["scores"][space][key], [
        fold["archive"][mix][space][key] for mix in fold.get("archive", {})])


def clean_mean(folds: list[dict], space: str, key: str) -> float:
    """Mean clean ROC-AUC of a (space, scorer) over folds."""
    return float(np.nanmean([f["scores"][space][key] for f in folds]))


def archive_mean(folds: list[dict], space: str, key: str, mixes=None) -> float:
    """Mean archive ROC-AUC of a (space, scorer) over folds and archive mixes (`mixes`, or
    every mix a fold has; NaN without archive sets)."""
    values = [f["archive"][mix][space][key] for f in folds
              for mix in (f.get("archive", {}) if mixes is None else mixes)]
    known = [v for v in values if not np.isnan(v)]     # a mix too big for its camera: NaN
    return float(np.mean(known)) if known else float("nan")


def scored_detectors(folds: list[dict], space: str) -> list[str]:
    """The registered detectors every fold scored in `space` (folds scored before a
    detector was registered lack it)."""
    return [n for n in registry.names() if all(n in f["scores"][space] for f in folds)]


def stream_choice(folds: list[dict], space: str, key: str) -> tuple[str, float]:
    """(score adaptation, its worst stream condition) of a (space, scorer): the adaptation
    `pick_adaptation` chooses among the folds' pooled results, and the lowest mean ROC-AUC
    over folds of any pooled mix or arrival order under it (`adaptation_criterion`);
    ("", NaN) when some fold scored no pooled sets in `space`."""
    if not folds or not all(space in next(iter(f.get("pooled", {}).values()), {})
                            for f in folds):
        return "", float("nan")
    means = pooled_means(folds, space, key)
    chosen = pick_adaptation(means)
    return chosen, adaptation_criterion(means[chosen])


def ranking_criterion(fold_mean: float, stream: float) -> float:
    """What a (candidate, space, detector set) is ranked by: the mean of its mean fold
    criterion (clean and archive fits, `fold_criterion`) and its worst stream condition
    (`stream_choice`), so a pipeline whose scores fall apart in one arrival order or
    anomaly mix loses to one that holds in all of them; the fold criterion alone for
    folds scored without pooled sets."""
    return 0.5 * (fold_mean + stream) if np.isfinite(stream) else fold_mean


def summarise(candidate_results: dict[str, list[dict]]) -> list[dict]:
    """Every choosable (candidate, space, detector set), best `ranking_criterion` first,
    with its mean fold criterion, clean and archive means, and the score adaptation
    chosen for it with its worst stream condition."""
    rows = []
    for name, folds in candidate_results.items():
        for space in folds[0]["scores"]:
            def values(key, space=space, folds=folds):
                return [fold_criterion(f, space, key) for f in folds]
            singles = {n: float(np.nanmean(values(n))) for n in scored_detectors(folds, space)}
            for key in dict.fromkeys(choosable_scorers(singles)):
                per_fold = values(key)
                mean = float(np.nanmean(per_fold))
                adaptation, stream = stream_choice(folds, space, key)
                rows.append({"candidate": name, "space": space, "scorer": key,
                             "criterion": ranking_criterion(mean, stream),
                             "mean": mean, "std": float(np.nanstd(per_fold)),
                             "folds": per_fold, "clean": clean_mean(folds, space, key),
                             "archive": archive_mean(folds, space, key),
                             "stream": stream, "score_adaptation": adaptation})
    return sorted(rows, key=lambda r: -r["criterion"] if np.isfinite(r["criterion"])
                  else np.inf)


def pick_best(ranking: list[dict], candidates: dict[str, Pipeline]) -> dict:
    """The ranking's best row, or, among the rows within TIE_MARGIN of it, the one whose
    candidate trains the fewest epochs (then the better criterion)."""
    top = _criterion(ranking[0])
    tied = [r for r in ranking
            if np.isfinite(_criterion(r)) and _criterion(r) >= top - TIE_MARGIN]
    return min(tied or ranking[:1],
               key=lambda r: (candidates[r["candidate"]].epochs, -_criterion(r)))


def _criterion(row: dict) -> float:
    """A ranking row's `ranking_criterion` (its fold criterion for a row without one)."""
    return row.get("criterion", row["mean"])


def _complete(result: dict, spaces: tuple[str, ...],
              adaptations: tuple[str, ...] = SCORE_ADAPTATION_CANDIDATES,
              detectors: tuple[str, ...] | None = None) -> bool:
    """Whether a fold's saved result scored every space by every one of `detectors`
    (None: every registered one) with their settings of now, in every pooled and archive
    mix (the pooled ones under every score adaptation of `adaptations`)."""
    pooled, archive = result.get("pooled", {}), result.get("archive", {})
    orders = result.get("orders", {})
    scores = result.get("scores", {})
    detectors = selection_detectors(detectors)
    # a fold scored before a detector's default changed, or without one of the detectors,
    # or before archive sets were scored as they are now, is scored again
    saved = result.get("detector_settings") or {}
    if {name: saved.get(name) for name in detectors} != registry.settings_of(detectors):
        return False
    if result.get("archive_scoring") != ARCHIVE_SCORING:
        return False
    return set(spaces) <= set(scores) and all(
        set(detectors) <= set(scores[space]) for space in spaces) and all(
        isinstance(sets.get(mix), dict) and set(spaces) <= set(sets[mix])
        and (sets is archive or all(set(adaptations) <= set(sets[mix][space])
                                    for space in spaces))
        for sets, mixes in ((pooled, POOLED_MIXES), (archive, ARCHIVE_MIXES),
                            (orders, ORDER_SETS))
        for mix in mixes)


def pooled_means(folds: list[dict], space: str, scorer: str) -> dict[str, dict]:
    """{adaptation: {"mean", "std", "mixes": {mix: {"mean", "folds"}}, "orders": {order:
    {"mean", "folds"}}, "worst_order"}}: the pooled ROC-AUC of one (space, scorer) under
    each score adaptation, per mix and over folds x mixes, and per arrival order with
    the worst order's mean over folds (folds scored without orders have none), and
    "worst": the lowest mean over folds of any mix or order."""
    out = {}
    mixes = list(folds[0]["pooled"])
    orders = list(folds[0].get("orders", {}))
    for adaptation in folds[0]["pooled"][mixes[0]][space]:
        per_mix = {mix: [f["pooled"][mix][space][adaptation][scorer] for f in folds]
                   for mix in mixes}
        values = [v for mix in mixes for v in per_mix[mix]]
        per_order = {name: [f["orders"][name][space][adaptation][scorer] for f in folds]
                     for name in orders}
        out[adaptation] = {"mean": float(np.nanmean(values)), "std": float(np.nanstd(values)),
                           "mixes": {mix: {"mean": float(np.nanmean(v)), "folds": v}
                                     for mix, v in per_mix.items()},
                           "orders": {name: {"mean": float(np.nanmean(v)), "folds": v}
                                      for name, v in per_order.items()}}
        if per_order:
            out[adaptation]["worst_order"] = min(
                float(np.nanmean(v)) for v in per_order.values())
        out[adaptation]["worst"] = min(
            float(np.nanmean(v)) for v in [*per_mix.values(), *per_order.values()])
    return out


def adaptation_criterion(means: dict) -> float:
    """What an adaptation is chosen by: its worst condition, the lowest mean ROC-AUC over
    folds of any arrival order or anomaly-share mix (a camera's stream may be ordered
    either way and hold either share)."""
    return means.get("worst", means["mean"])


def pick_adaptation(means: dict[str, dict],
                    incumbent: str = DEFAULT_PIPELINE.score_adaptation) -> str:
    """The adaptation with the best `adaptation_criterion`, unless "none", then the
    `incumbent` (the shipped default's), is within TIE_MARGIN of it: a change needs
    more evidence than a difference the folds' noise makes (when the worst condition is
    one that the adaptations hardly move, many tie, docs/results/selection-shift/)."""
    best = max(means, key=lambda a: adaptation_criterion(means[a]))
    for keeper in ("none", incumbent):
        if keeper in means and (adaptation_criterion(means[best])
                                <= adaptation_criterion(means[keeper]) + TIE_MARGIN):
            return keeper
    return best


@dataclass(frozen=True)
class SelectionSettings:
    """How every fold of a selection is trained and scored."""

    seed: int = 0
    size: int = 32
    device: str = "cpu"
    spaces: tuple[str, ...] = SPACE_CANDIDATES
    fit_rows: int | None = None
    score_adaptations: tuple[str, ...] = SCORE_ADAPTATION_CANDIDATES
    #: the detectors fitted and chosen among, in registry order (a set's key names its
    #: members in that order)
    detectors: tuple[str, ...] = field(default_factory=lambda: selection_detectors(None))


@dataclass(frozen=True)
class FoldTask:
    """One (dataset, candidate, fold) of a selection and where its result is kept."""

    data: str
    candidate: str
    fold: Fold
    path: Path
    runs_dir: Path


def dataset_tags(datas: list[str]) -> list[str]:
    """A short distinct name per dataset (its folder's name; a repeated name gets -2,
    -3, ...): where its folds and runs are kept when a selection has several, and its
    column in the reports. One dataset: [""] (kept where a one-dataset selection keeps
    them)."""
    if len(datas) == 1:
        return [""]
    tags: list[str] = []
    for data in datas:
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(data.rstrip("/")).name) or "data"
        tag, n = base, 1
        while tag in tags:
            n += 1
            tag = f"{base}-{n}"
        tags.append(tag)
    return tags


def fold_tasks(datas: list[str], candidates, out: Path, n_folds: int,
               settings: SelectionSettings) -> tuple[list[FoldTask], dict[str, list[Fold]]]:
    """Every (dataset, candidate, fold) in order, and each dataset's folds (by tag)."""
    tasks, folds_by = [], {}
    rows = f"-fit{settings.fit_rows}" if settings.fit_rows else ""
    for tag, data in zip(dataset_tags(datas), datas, strict=True):
        folds_by[tag] = make_folds(load_dataset(data), n_folds, settings.seed)
        (out / "folds" / tag).mkdir(parents=True, exist_ok=True)
        tasks += [FoldTask(data, name, fold, out / "folds" / tag
                           / f"{name}-{fold.name}-s{settings.seed}{rows}.json",
                           out / "runs" / tag)
                  for name in candidates for fold in folds_by[tag]]
    return tasks, folds_by


def spaces_to_score(result: dict | None, settings: SelectionSettings) -> tuple[str, ...]:
    """The requested spaces a fold's saved `result` is not complete in (scored by every
    requested detector with today's settings, under every score adaptation asked for):
    none when it is complete, all of them without a result."""
    if result is None:
        return settings.spaces
    return tuple(space for space in settings.spaces
                 if not _complete(result, (space,), settings.score_adaptations,
                                  settings.detectors))


def with_spaces(result: dict, scored: dict) -> dict:
    """`result` with the spaces of `scored` (a run of the same fold) added."""
    merged = {**result, "scores": {**result["scores"], **scored["scores"]},
              "detector_settings": {**result.get("detector_settings", {}),
                                    **scored.get("detector_settings", {})}}
    for sets in ("pooled", "orders", "archive"):
        held, added = result.get(sets, {}), scored.get(sets, {})
        merged[sets] = {mix: {**held.get(mix, {}), **added.get(mix, {})}
                        for mix in {**held, **added}}
    return merged


def fold_result(task: FoldTask, candidate: Pipeline, settings: SelectionSettings) -> dict:
    """A task's saved result when complete, else its fold run now in the spaces it lacks
    (`spaces_to_score`), saved."""
    result = json.loads(task.path.read_text()) if task.path.is_file() else None
    spaces = spaces_to_score(result, settings)
    if result is not None and not spaces:
        return result
    scored = run_fold(candidate, task.data, task.fold, task.runs_dir, seed=settings.seed,
                      size=settings.size, device=settings.device, progress=False,
                      spaces=spaces, fit_rows=settings.fit_rows,
                      adaptations=settings.score_adaptations, detectors=settings.detectors)
    if result is not None and spaces != settings.spaces:
        scored = with_spaces(result, scored)
    # no indent: json's C encoder (the indented form is written by Python, 8x slower for
    # a fold's hundreds of thousands of figures)
    task.path.write_text(json.dumps(scored))
    return scored


def _folds_in_worker(tasks: list[tuple[FoldTask, Pipeline]], settings: SelectionSettings,
                     threads: int) -> None:
    torch.set_num_threads(threads)
    with threadpool_limits(threads):          # numpy's BLAS and OpenMP in the detectors
        for task, candidate in tasks:
            fold_result(task, candidate, settings)


def run_folds_in_parallel(tasks: list[FoldTask], candidates: dict[str, Pipeline],
                          settings: SelectionSettings, jobs: int, progress: bool) -> None:
    """Train and score every task, `jobs` at a time in worker processes (`start_method`)
    on cpus // jobs torch threads each; finished folds are reused. Every task is
    attempted; the failures are then reported together."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    # candidates that train alike (space variants) share a run: one worker trains it
    groups: dict[tuple, list[tuple[FoldTask, Pipeline]]] = {}
    for task in tasks:
        candidate = candidates[task.candidate]
        key = (task.runs_dir, candidate.training_name, task.fold.name)
        groups.setdefault(key, []).append((task, candidate))
    failures = []
    with concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, mp_context=worker_context()) as pool:
        futures = {pool.submit(_folds_in_worker, group, settings, threads): group[0][0]
                   for group in groups.values()}
        for future in tqdm(concurrent.futures.as_completed(futures), total=len(futures),
                           desc=f"select ({jobs} at a time)", disable=not progress):
            if future.exception() is not None:
                failures.append(f"{futures[future].path.name}: {future.exception()!r}")
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(groups)} selection runs failed: "
                           + "; ".join(failures))


def reduced_fold(result: dict, spaces: tuple[str, ...],
                 adaptations: tuple[str, ...] = SCORE_ADAPTATION_CANDIDATES,
                 detectors: tuple[str, ...] | None = None) -> dict:
    """A fold result reduced to `spaces`, to the scorers of `detectors` (None: all it
    holds) and, in its pooled sets, to `adaptations` (a saved fold may have scored more)."""
    keep = _scorers_of(result, detectors)

    def scorers(aucs: dict[str, float]) -> dict[str, float]:
        return aucs if keep is None else {k: v for k, v in aucs.items() if k in keep}
    result["scores"] = {space: scorers(result["scores"][space]) for space in spaces}
    result["archive"] = {mix: {space: scorers(result["archive"][mix][space])
                               for space in spaces} for mix in ARCHIVE_MIXES}
    for sets, mixes in (("pooled", POOLED_MIXES), ("orders", ORDER_SETS)):
        result[sets] = {mix: {space: {a: scorers(result[sets][mix][space][a])
                                      for a in adaptations}
                              for space in spaces} for mix in mixes}
    return result


def _scorers_of(result: dict, detectors: tuple[str, ...] | None) -> set[str] | None:
    """The scorer keys of `detectors` and their sets, when a fold's `result` was scored by
    more detectors than those (None: keep every key it holds)."""
    if detectors is None or set(result.get("detector_settings", {})) <= set(detectors):
        return None
    return set(scorer_keys(detectors))


def selection_detectors(detectors) -> tuple[str, ...]:
    """`detectors` (None or empty: every registered one) checked and in registry order,
    the order the keys of their sets name them in; an unknown name is InvalidInput."""
    if not detectors:
        return tuple(registry.names())
    wanted = set(detectors)
    for name in wanted:
        registry.get(name)
    return tuple(name for name in registry.names() if name in wanted)


def run_selection(data: str | list[str], candidates: dict[str, Pipeline], out: Path, *,
                  n_folds: int = 3, seed: int = 0, size: int = 32, device: str = "cpu",
                  progress: bool = True, spaces: tuple[str, ...] = SPACE_CANDIDATES,
                  fit_rows: int | None = None, jobs: int = 1,
                  score_adaptations: tuple[str, ...] = SCORE_ADAPTATION_CANDIDATES,
                  detectors: tuple[str, ...] | None = None) -> dict:
    """Every candidate on the same folds of every dataset (`data`: one DIR or several),
    in every space of `spaces`, the detectors (`detectors`, None: every registered one,
    and their sets) fitted on all of a fold's fit rows or a seeded `fit_rows` of them;
    the pipeline is chosen by its criterion over all datasets' folds. Writes
    OUT/selection.json and returns it.

    Finished folds are kept in OUT/folds/ (OUT/folds/TAG/ per dataset when there are
    several, `dataset_tags`) and reused, so an interrupted run resumes; a finished fold
    that lacks some of `spaces`, or scored them without one of `detectors`, is scored in
    those (its trained encoder, kept in OUT/runs/, is reused). Only `spaces` and the sets
    of `detectors` enter the ranking. `jobs` > 1 runs that many
    folds at once. The score adaptation is chosen among `score_adaptations`.
    """
    datas = [data] if isinstance(data, str) else list(data)
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    for adaptation in score_adaptations:      # a bad name fails before any training
        parse_score_adaptation(adaptation)
    for space in spaces:
        parse_space(space)
    settings = SelectionSettings(seed, size, device, tuple(spaces), fit_rows,
                                 tuple(dict.fromkeys(score_adaptations)),
                                 selection_detectors(detectors))
    out = Path(out)
    tasks, folds_by = fold_tasks(datas, candidates, out, n_folds, settings)
    if jobs > 1:
        run_folds_in_parallel(tasks, candidates, settings, jobs, progress)
    results: dict[str, list[dict]] = {}
    for task in tqdm(tasks, desc="select", disable=not progress):
        result = fold_result(task, candidates[task.candidate], settings)
        results.setdefault(task.candidate, []).append(
            reduced_fold(result, settings.spaces, settings.score_adaptations,
                         settings.detectors))
    ranking = summarise(results)
    if len(datas) > 1:
        add_dataset_means(ranking, [tag for tag, folds in folds_by.items() for _ in folds])
    summary = choose(ranking, results, candidates)
    summary = {"data": data if isinstance(data, str) else datas, "seed": seed, "size": size,
               "fit_rows": fit_rows, "detectors": list(settings.detectors),
               "folds": [f.__dict__ for folds in folds_by.values() for f in folds],
               **({"datasets": [{"tag": tag, "data": d, "folds": [f.__dict__ for f in folds]}
                                for d, (tag, folds) in zip(datas, folds_by.items(),
                                                           strict=True)]}
                  if len(datas) > 1 else {}),
               "candidates": {k: v.to_json() for k, v in candidates.items()}, **summary,
               "ranking": ranking[:200]}
    (out / "selection.json").write_text(json.dumps(summary, indent=1))
    (out / "selection.md").write_text(format_selection(summary, results))
    return summary


def choose(ranking: list[dict], results: dict[str, list[dict]],
           candidates: dict[str, Pipeline]) -> dict:
    """{"chosen": pipeline JSON, "best": ranking row, "score_adaptation": per
    adaptation means}: the best row's candidate, space and detector set, with the score
    adaptation chosen for it."""
    best = pick_best(ranking, candidates)
    detectors = (tuple(best["scorer"][len(ENSEMBLE_PREFIX):].split("+"))
                 if best["scorer"].startswith(ENSEMBLE_PREFIX) else (best["scorer"],))
    if set(detectors) == set(registry.PAPER_DETECTORS):
        detectors = ()
    adaptations = pooled_means(results[best["candidate"]], best["space"], best["scorer"])
    chosen = replace(candidates[best["candidate"]], space=best["space"], detectors=detectors,
                     score_adaptation=pick_adaptation(adaptations))
    return {"chosen": chosen.to_json(), "best": best, "score_adaptation": adaptations}


def add_dataset_means(ranking: list[dict], fold_tags: list[str]) -> None:
    """Give every ranking row "datasets": {tag: {"mean", "folds"}}, its fold criteria
    split by dataset (`fold_tags`: each fold's dataset, in the rows' fold order)."""
    for row in ranking:
        row["datasets"] = {}
        for tag in dict.fromkeys(fold_tags):
            values = [v for v, t in zip(row["folds"], fold_tags, strict=True) if t == tag]
            row["datasets"][tag] = {"mean": float(np.nanmean(values)), "folds": values}


def detector_lines(best: dict, folds: list[dict]) -> list[str]:
    """Markdown rows: each detector alone in the chosen candidate's chosen space, its
    clean ROC-AUC and its archive ROC-AUC per mix (means over folds)."""
    space = best["space"]
    mixes = list(folds[0].get("archive", {}))
    if not mixes:
        return []
    lines = ["", f"Each detector alone ({best['candidate']}, {space}), mean over folds:", "",
             "| detector | clean | " + " | ".join(f"archive {mix}" for mix in mixes)
             + " | criterion |", "| --- | --- |" + " --- |" * (len(mixes) + 1)]
    for name in scored_detectors(folds, space):
        cells = [archive_mean(folds, space, name, (mix,)) for mix in mixes]
        criterion = float(np.nanmean([fold_criterion(f, space, name) for f in folds]))
        lines.append(f"| {name} | {clean_mean(folds, space, name):.3f} | "
                     + " | ".join(f"{c:.3f}" for c in cells) + f" | {criterion:.3f} |")
    return lines


def _shares(shares: tuple[float, float] | None) -> str:
    return "each camera's own" if shares is None else f"{shares[0]:g} / {shares[1]:g}"


def _mix_words(share: float, frames: int, one_event: bool) -> str:
    """An archive mix for a person: its anomaly share and how its anomalies repeat."""
    words = f"{share:g} anomalies"
    if frames > 1:
        words += (f" in bursts of {frames} frames, one event each" if one_event
                  else f" each seen in {frames} separate events")
    return words


def candidate_lines(results: dict[str, list[dict]]) -> list[str]:
    """Markdown rows: per candidate x space, the criterion of the ensemble of all
    detectors, of KNN and of the best choosable set, with the best set's clean, archive
    and worst-stream parts."""
    lines = ["| candidate | space | ensemble (all) | KNN | best choosable set | its criterion "
             "| its clean | its archive | its worst stream |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, folds in results.items():
        for space in folds[0]["scores"]:
            def mean(key, space=space, folds=folds):
                values = [fold_criterion(f, space, key) for f in folds]
                return float(np.nanmean(values)) if np.isfinite(values).any() else -1.0
            scored = scored_detectors(folds, space)
            keys = choosable_scorers({n: mean(n) for n in scored})
            # each set's worst stream once (its pooled means over every adaptation)
            stream = {key: stream_choice(folds, space, key)[1] for key in dict.fromkeys(keys)}
            criterion = {key: ranking_criterion(mean(key), stream[key]) for key in stream}
            best = max(keys, key=criterion.__getitem__)
            all_key = ENSEMBLE_PREFIX + "+".join(scored)
            knn = f"{criterion['KNN']:.3f}" if "KNN" in scored else "–"
            lines.append(f"| {name} | {space} | {criterion[all_key]:.3f} | {knn} | "
                         f"{best.replace(ENSEMBLE_PREFIX, '')} | {criterion[best]:.3f} | "
                         f"{clean_mean(folds, space, best):.3f} | "
                         f"{archive_mean(folds, space, best):.3f} | {stream[best]:.3f} |")
    return lines


def format_selection(summary: dict, results: dict[str, list[dict]]) -> str:
    """Markdown: the chosen pipeline; per candidate x space the ensemble of all detectors,
    KNN and the best detector set by criterion (`candidate_lines`); each detector alone
    in the chosen space, clean and per archive mix; the score adaptations."""
    best_row = summary["best"]
    lines = ["# Pipeline selection (training cameras only)", "",
             data_line(summary), "",
             f"**chosen**: `{json.dumps(summary['chosen'])}` (criterion "
             f"{_criterion(best_row):.3f}: mean fold criterion {best_row['mean']:.3f} ± "
             f"{best_row['std']:.3f}, clean ROC-AUC {best_row.get('clean', float('nan')):.3f}, "
             f"archive {best_row.get('archive', float('nan')):.3f}; worst stream condition "
             f"{best_row.get('stream', float('nan')):.3f})", "",
             "Criterion: the mean of the fold criterion and the worst stream condition. The "
             "fold criterion is the mean of the clean ROC-AUC (detectors fitted on the other "
             "cameras' normal rows) and the archive ROC-AUC (fitted on those rows plus the "
             "scored images, each scored without its own event; mean over the archive "
             "mixes " + ", ".join(f"{mix}: {_mix_words(*spec)}"
                                  for mix, spec in ARCHIVE_MIXES.items()) + "). The worst "
             "stream condition is the lowest mean pooled ROC-AUC of any anomaly-share mix "
             "or arrival order under the score adaptation chosen for that pipeline (below).",
             "", *candidate_lines(results)]
    lines += dataset_lines(summary)
    lines += detector_lines(summary["best"], results[summary["best"]["candidate"]])
    adaptations = summary.get("score_adaptation") or {}
    if adaptations:
        best = summary["best"]
        lines += ["", "Score adaptation, chosen for the chosen candidate, space and detector "
                  f"set ({best['candidate']}, {best['space']}, "
                  f"{best['scorer'].replace(ENSEMBLE_PREFIX, '')}): ROC-AUC of each fold's "
                  "held-out camera pooled with the other training cameras' val images, in "
                  "each mix (anomaly share of the held-out camera / of the others: "
                  + ", ".join(f"{mix} {_shares(shares)}" for mix, shares in POOLED_MIXES.items())
                  + ")", ""]
        mixes = list(next(iter(adaptations.values())).get("mixes", {}))
        lines += ["| score adaptation | mean over folds x mixes | "
                  + " | ".join(f"{mix} (folds)" for mix in mixes) + " |",
                  "| --- | --- |" + " --- |" * len(mixes)]
        for name, v in adaptations.items():
            cells = [_mean_and_folds(v["mixes"][mix]) for mix in mixes]
            lines.append(f"| {name} | {v['mean']:.3f} ± {v['std']:.3f} | "
                         + " | ".join(cells) + " |")
        lines += order_lines(adaptations)
    return "\n".join(lines) + "\n"


def _mean_and_folds(means: dict) -> str:
    """A table cell: the mean over folds, then each fold's value ("0.712 (0.7 / ...)")."""
    return (f"{means['mean']:.3f} (" + " / ".join(f"{v:.3f}" for v in means["folds"])
            + ")")


def data_line(summary: dict) -> str:
    """The report's line naming the data, the settings and the folds."""
    detectors = summary.get("detectors") or registry.names()
    settings = (f"seed {summary['seed']}, {summary['size']} px"
                + (f", detectors fitted on {summary['fit_rows']:,} rows per fold"
                   if summary.get("fit_rows") else "")
                + (f", detectors {', '.join(detectors)} only"
                   if set(detectors) != set(registry.names()) else ""))
    if "datasets" not in summary:
        return (f"data `{summary['data']}`, {settings}; folds (held-out camera ~ held-out "
                "class): " + ", ".join(f"{f['env']}~{f['label']}" for f in summary["folds"]))
    return (f"{len(summary['datasets'])} datasets, {settings}; the pipeline is chosen by the "
            "criterion over all datasets' folds; folds (held-out camera ~ held-out class): "
            + "; ".join(f"`{d['data']}` ({d['tag']}): "
                        + ", ".join(f"{f['env']}~{f['label']}" for f in d["folds"])
                        for d in summary["datasets"]))


def dataset_lines(summary: dict) -> list[str]:
    """Markdown rows (several datasets only): per candidate, its best (space, detector
    set) by the mean over all folds, with each dataset's mean and fold criteria."""
    if "datasets" not in summary:
        return []
    tags = [d["tag"] for d in summary["datasets"]]
    best_rows: dict[str, dict] = {}
    for row in summary["ranking"]:            # best first
        best_rows.setdefault(row["candidate"], row)
    lines = ["", "Per dataset: each candidate's best space and detector set by the criterion "
             "over all folds, its fold criterion per dataset (mean, then each fold):", "",
             "| candidate | space | set | criterion | mean fold criterion | "
             + " | ".join(tags) + " |",
             "| --- | --- | --- | --- | --- |" + " --- |" * len(tags)]
    for name, row in best_rows.items():
        cells = [_mean_and_folds(row["datasets"][t]) for t in tags]
        lines.append(f"| {name} | {row['space']} | {row['scorer'].replace(ENSEMBLE_PREFIX, '')}"
                     f" | {_criterion(row):.3f} | {row['mean']:.3f} | " + " | ".join(cells)
                     + " |")
    return lines


def order_lines(adaptations: dict[str, dict]) -> list[str]:
    """Markdown rows: each score adaptation's pooled ROC-AUC (natural mix) per arrival
    order, mean over folds, and its worst order (what it is chosen by)."""
    orders = list(next(iter(adaptations.values())).get("orders", {}))
    if not orders:
        return []
    lines = ["", "The natural mix, and the new-heavy one (`new-heavy ...`), in each "
             "arrival order (envad/arrival_orders.py; each camera's images in that order, "
             "every chunk scored with the statistics of the rows stored before it): mean "
             "ROC-AUC over folds. The adaptation is chosen by its worst condition, the "
             "lowest of any order or mix.", "",
             "| score adaptation | worst condition | worst order | " + " | ".join(orders)
             + " |", "| --- | --- | --- |" + " --- |" * len(orders)]
    for name, v in adaptations.items():
        lines.append(f"| {name} | {v['worst']:.3f} | {v['worst_order']:.3f} | "
                     + " | ".join(f"{v['orders'][o]['mean']:.3f}" for o in orders) + " |")
    return lines
