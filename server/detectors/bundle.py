"""Detector bundles: fitted detectors + calibration + threshold, for one encoder.

Calibration: the fit rows are split (seeded) into a fit part and a held-out calibration
part (`calibration_fraction`, default 20%). Detectors are fitted on the fit part and
score the calibration part; a raw score's calibrated value is the fraction of those
held-out scores at or below it. Held-out scores are unbiased for every detector (a KDE
or KNN scoring its own training points would look too normal). The ensemble is the mean
calibrated score; the threshold is the (1 - contamination) quantile of the calibration
part's ensemble scores.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from envad.errors import InvalidInput
from envad.server.detectors import registry
from envad.server.detectors.stylist import select_features

MIN_SAMPLES = 20
DEFAULT_CALIBRATION_FRACTION = 0.2


@dataclass(frozen=True)
class BundleScores:
    raw: dict[str, np.ndarray]
    calibrated: dict[str, np.ndarray]
    ensemble: np.ndarray


@dataclass
class DetectorBundle:
    """Fitted detectors of one encoder, ready to score embeddings of that encoder."""

    bundle_id: str
    model_id: str
    detectors: list[str]
    fitted: dict[str, registry.Detector] = field(repr=False)
    reference: dict[str, np.ndarray] = field(repr=False)   # sorted held-out raw scores
    threshold: float
    contamination: float
    n_samples: int
    n_features: int
    kept_features: np.ndarray | None = field(default=None, repr=False)
    stats: dict[str, dict] = field(default_factory=dict)
    created: str = ""
    fit_filter: dict = field(default_factory=dict)
    seed: int = 0

    def score(self, X: np.ndarray) -> BundleScores:
        """Raw, calibrated and ensemble scores of embeddings X [n, n_features]."""
        X = _check_matrix(X, self.n_features)
        if self.kept_features is not None:
            X = X[:, self.kept_features]
        raw = {name: self.fitted[name].score(X) for name in self.detectors}
        calibrated = {name: calibrate(raw[name], self.reference[name]) for name in raw}
        ensemble = np.mean(np.stack(list(calibrated.values())), axis=0)
        return BundleScores(raw, calibrated, ensemble)


def calibrate(raw: np.ndarray, reference_sorted: np.ndarray) -> np.ndarray:
    """Fraction of reference scores <= each raw score, in [0, 1]."""
    ranks = np.searchsorted(reference_sorted, raw, side="right")
    return ranks.astype(np.float64) / len(reference_sorted)


def _check_matrix(X: np.ndarray, n_features: int | None = None) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise InvalidInput(f"embeddings must be a 2-D array, got shape {list(X.shape)}")
    if n_features is not None and X.shape[1] != n_features:
        raise InvalidInput(f"embeddings have {X.shape[1]} dims, bundle expects {n_features}")
    if not np.isfinite(X).all():
        raise InvalidInput("embeddings contain NaN or infinity")
    return X


def _bundle_id(X: np.ndarray, detectors: list[str], seed: int) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(X, dtype=np.float32).tobytes())
    digest.update(repr((detectors, seed)).encode())
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-{digest.hexdigest()[:10]}"


def fit_bundle(X: np.ndarray, *, detectors: list[str] | None = None, seed: int = 0,
               contamination: float = 0.05, max_samples: int = 20000,
               stylist_drop_fraction: float | None = None, envs: np.ndarray | None = None,
               model_id: str = "", fit_filter: dict | None = None,
               calibration_fraction: float = DEFAULT_CALIBRATION_FRACTION,
               progress: bool = False) -> DetectorBundle:
    """Fit the named detectors (default: all) on embeddings X of normal images."""
    X = _check_matrix(X)
    names = list(detectors) if detectors else registry.names()
    for name in names:
        registry.get(name)
    if len(set(names)) != len(names):
        raise InvalidInput(f"detector names repeat: {names}")
    if not 0.0 < contamination < 1.0:
        raise InvalidInput(f"contamination must be in (0, 1), got {contamination}")
    if not 0.0 < calibration_fraction < 1.0:
        raise InvalidInput(f"calibration_fraction must be in (0, 1), got {calibration_fraction}")
    if len(X) < MIN_SAMPLES:
        raise InvalidInput(f"need at least {MIN_SAMPLES} rows to fit detectors, got {len(X)}")
    if max_samples < MIN_SAMPLES:
        raise InvalidInput(f"max_samples must be at least {MIN_SAMPLES}")
    rng = np.random.default_rng(seed)
    rows = np.arange(len(X))
    if len(X) > max_samples:
        rows = np.sort(rng.choice(len(X), size=max_samples, replace=False))
    n_features = X.shape[1]
    kept = None
    if stylist_drop_fraction is not None:
        if envs is None:
            raise InvalidInput("Stylist feature selection needs the rows' environments")
        envs = np.asarray(envs).astype(str)
        kept = select_features(X[rows], envs[rows], stylist_drop_fraction)
    data = X[rows] if kept is None else X[rows][:, kept]
    shuffled = rng.permutation(len(data))
    n_cal = max(int(round(calibration_fraction * len(data))), MIN_SAMPLES // 2)
    cal_part, fit_part = data[shuffled[:n_cal]], data[shuffled[n_cal:]]
    fitted, reference, stats = {}, {}, {}
    cal_ensemble = np.zeros(len(cal_part))
    for name in tqdm(names, desc="fitting detectors", disable=not progress):
        start = time.perf_counter()
        fitted[name] = registry.Detector(name, seed).fit(fit_part)
        stats[name] = {"fit_seconds": time.perf_counter() - start, "n_samples": len(fit_part)}
        held_out = fitted[name].score(cal_part)
        reference[name] = np.sort(held_out)
        cal_ensemble += calibrate(held_out, reference[name]) / len(names)
    threshold = float(np.quantile(cal_ensemble, 1.0 - contamination))
    return DetectorBundle(
        bundle_id=_bundle_id(data, names, seed), model_id=model_id, detectors=names,
        fitted=fitted, reference=reference, threshold=min(max(threshold, 1e-9), 1.0),
        contamination=contamination, n_samples=len(data), n_features=n_features,
        kept_features=kept, stats=stats,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        fit_filter=dict(fit_filter or {}), seed=seed,
    )
