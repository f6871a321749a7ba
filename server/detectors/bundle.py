"""Detector bundles: fitted detectors + calibration + threshold, for one encoder.

Calibration: the fit rows are split (seeded) into a fit part and a held-out calibration
part (`calibration_fraction`, default 20%). Detectors are fitted on the fit part and
score the calibration part; a raw score's calibrated value is its place among those
held-out scores, strictly increasing in the raw score (calibration.py). Held-out scores
are unbiased for every detector (a KDE or KNN scoring its own training points would look
too normal). A bundle fitted with its rows' ids scores a fit row, later, without its own
event (leave_out.py), so scoring the rows it was fitted on stays on the same footing.
The ensemble is the mean calibrated score; the threshold is the (1 - contamination)
quantile of the calibration part's ensemble scores.

A space step (geometry.py) comes first: fitted on the same rows, it maps every embedding
into the space the detectors were fitted in (`auto`: chosen on the fitting rows by
space_selection.py's leave-one-camera-out novelty proxy when they carry >= 2 cameras and
>= 2 content labels, else FALLBACK_SPACE).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from tqdm import tqdm

from envad.defaults import DEFAULT_CONTAMINATION, FIT_MAX_SAMPLES
from envad.errors import InvalidInput
from envad.records import BundleInfo, DetectorFitStats, RowFilter
from envad.server.detectors import registry, unseen_camera
from envad.server.detectors.calibration import DEFAULT_CALIBRATION, Calibration
from envad.server.detectors.geometry import DEFAULT_MIN_CAMERA_ROWS, EmbeddingSpace, parse_space
from envad.server.detectors.leave_out import FitGroups
from envad.server.detectors.reviewed import ReviewMemory, known_anomalies
from envad.server.detectors.score_adaptation import (
    ReferenceMoments,
    ScoreAdaptation,
    parse_score_adaptation,
)
from envad.server.detectors.space_selection import choose_space, usable_for_selection
from envad.server.detectors.stylist import select_features
from envad.server.detectors.unseen_camera import UnseenCameraPrior
from envad.server.env_stats import EnvStatistics

MIN_SAMPLES = 20
DEFAULT_CALIBRATION_FRACTION = 0.2
AUTO_SPACE = "auto"
#: the space when `auto` cannot choose (no labels, or one camera)
FALLBACK_SPACE = "l2"


#: rows `score_stream` scores at a time, as a client's requests deliver them
STREAM_CHUNK = 64

@dataclass(frozen=True)
class BundleScores:
    """Scores of rows: each detector's raw score, that score on the fit set's scale for
    its camera (`adapted`, score_adaptation.py; = raw when the bundle does not adapt),
    its calibration, the ensemble, and per row how the space step placed the camera and
    the weight of the camera's own score statistics."""

    raw: dict[str, np.ndarray]
    calibrated: dict[str, np.ndarray]
    ensemble: np.ndarray
    adaptation: list[str] = field(default_factory=list)   # per row (geometry.ADAPTED_*)
    adapted: dict[str, np.ndarray] = field(default_factory=dict)
    camera_weight: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def rows(self, start: int, stop: int) -> BundleScores:
        """The scores of rows start..stop."""
        return BundleScores({n: v[start:stop] for n, v in self.raw.items()},
                            {n: v[start:stop] for n, v in self.calibrated.items()},
                            self.ensemble[start:stop], self.adaptation[start:stop],
                            {n: v[start:stop] for n, v in self.adapted.items()},
                            self.camera_weight[start:stop])

    @staticmethod
    def concat(parts: list[BundleScores]) -> BundleScores:
        """The scores of consecutive parts, in order."""
        if len(parts) == 1:
            return parts[0]
        names = list(parts[0].raw)

        def joined(attribute: str) -> dict[str, np.ndarray]:
            return {n: np.concatenate([getattr(p, attribute)[n] for p in parts])
                    for n in names}
        return BundleScores(joined("raw"), joined("calibrated"),
                            np.concatenate([p.ensemble for p in parts]),
                            [a for p in parts for a in p.adaptation], joined("adapted"),
                            np.concatenate([p.camera_weight for p in parts]))


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
    space: EmbeddingSpace = field(default_factory=EmbeddingSpace)
    space_scores: dict[str, float] = field(default_factory=dict)   # auto: proxy per candidate
    score_adaptation: ScoreAdaptation = field(default_factory=ScoreAdaptation)
    calibration: str = DEFAULT_CALIBRATION    # calibration.py's kind
    fit_groups: FitGroups | None = field(default=None, repr=False)   # leave_out.py
    reviewed: ReviewMemory | None = field(default=None, repr=False)   # reviewed.py
    unseen_camera: UnseenCameraPrior | None = field(default=None, repr=False)
    _calibrations: dict[str, Calibration] = field(default_factory=dict, init=False,
                                                  repr=False, compare=False)
    _reference_moments: ReferenceMoments | None = field(default=None, init=False,
                                                        repr=False, compare=False)

    def calibrate(self, name: str, raw: np.ndarray) -> np.ndarray:
        """Detector `name`'s raw (or adapted) scores calibrated against its reference."""
        if name not in self._calibrations:
            self._calibrations[name] = Calibration.of(self.reference[name], self.calibration)
        return self._calibrations[name](raw)

    def new_score_statistics(self, path=None) -> EnvStatistics:
        """Per-camera statistics of this bundle's scores (score_adaptation.py), kept in
        `path` (None: in memory)."""
        return EnvStatistics(path, self.score_adaptation.dim(len(self.detectors)))

    def adapting(self, adaptation: ScoreAdaptation) -> DetectorBundle:
        """This bundle with another score adaptation, sharing its calibrations and
        reference moments (they do not depend on the adaptation)."""
        other = replace(self, score_adaptation=adaptation)
        other._calibrations = self._calibrations
        other._reference_moments = self.reference_moments
        return other

    @property
    def reference_moments(self) -> ReferenceMoments:
        if self._reference_moments is None:
            self._reference_moments = ReferenceMoments.of(self.reference, self.detectors,
                                                          self.unseen_camera)
        return self._reference_moments

    def raw_scores(self, X: np.ndarray, envs=None, running=None, ids=None
                   ) -> tuple[dict[str, np.ndarray], list[str]]:
        """Each detector's raw score of embeddings X [n, n_features] from cameras
        `envs`, and per row how the space step adapted its camera. `running(env)` gives
        a camera's embedding statistics (camera-aware spaces). `ids`: the rows' ids; a
        row that is one of the bundle's own fit rows is scored without its group
        (leave_out.py)."""
        embeddings = _check_matrix(X, self.n_features)
        X, adaptation = self.space.transform(embeddings, envs, running)
        if self.kept_features is not None:
            X = X[:, self.kept_features]
        X32 = np.ascontiguousarray(X, dtype=np.float32)   # one copy for every float32 detector
        leave_out = None if self.fit_groups is None else self.fit_groups.leave_out(ids)
        raw = {name: self.fitted[name].score(_detector_input(name, embeddings, X, X32),
                                             leave_out)
               for name in self.detectors}
        return raw, adaptation

    def score(self, X: np.ndarray, envs=None, running=None,
              score_stats: EnvStatistics | None = None, ids=None,
              known_raw: tuple[dict[str, np.ndarray], list[str]] | None = None
              ) -> BundleScores:
        """Raw, adapted, calibrated and ensemble scores of embeddings X [n, n_features]
        from cameras `envs` (`running`, `ids`: as `raw_scores`). `score_stats` (from
        `new_score_statistics`) holds each camera's score statistics, which adapt the
        scores (a bundle that adapts scores, with no `score_stats`, scores unadapted).
        Reads the statistics, never changes them (`observe` does, for stored rows).
        `known_raw`: `raw_scores` of these rows by a bundle of the same fit, reused (raw
        scores do not depend on the score adaptation)."""
        raw, adaptation = known_raw or self.raw_scores(X, envs, running, ids)
        adapted, weight = raw, np.zeros(len(X))
        if self.score_adaptation.enabled and score_stats is not None and envs is not None:
            adapted, weight = self.score_adaptation.adapt(raw, self.reference_moments,
                                                          self.detectors, envs, score_stats.get)
        calibrated = {name: self.calibrate(name, adapted[name]) for name in raw}
        # added detector by detector: a row's ensemble does not depend on the rows
        # scored with it (np.mean over a stack sums pairwise or in order by its shape)
        ensemble = np.zeros(len(X))
        for name in self.detectors:
            ensemble += calibrated[name]
        ensemble /= len(self.detectors)
        if self.reviewed is not None:     # reviewed false alarms, new content, their content
            ensemble = self.reviewed.adjust(ensemble, self.detector_space(X, envs, running),
                                            envs)
        return BundleScores(raw, calibrated, ensemble, adaptation, adapted, weight)

    def detector_space(self, X: np.ndarray, envs=None, running=None) -> np.ndarray:
        """Embeddings X in the space the detectors score in (space step, kept features)."""
        out, _ = self.space.transform(_check_matrix(X, self.n_features), envs, running)
        return out if self.kept_features is None else out[:, self.kept_features]

    def observe_scores(self, raw: dict[str, np.ndarray], envs,
                       score_stats: EnvStatistics | None) -> None:
        """Add stored rows' raw scores (`raw_scores`) to their cameras' score
        statistics, as the adaptation takes them (score_adaptation.py)."""
        if not self.score_adaptation.enabled or score_stats is None or envs is None:
            return
        envs = np.asarray(envs).astype(str)
        keep, rows = self.score_adaptation.observations(
            raw, self.reference_moments, self.detectors, envs, score_stats.get)
        score_stats.update(envs[keep], rows)

    def observe(self, X: np.ndarray, envs, running=None,
                score_stats: EnvStatistics | None = None, ids=None) -> None:
        """Stored rows X from cameras `envs` join their cameras' score statistics (the
        only way those statistics change)."""
        if not self.score_adaptation.enabled or score_stats is None or envs is None:
            return
        envs = np.asarray(envs).astype(str)
        wanted = self.score_adaptation.wanted(envs, score_stats.get)
        if not wanted.any():            # every camera's statistics are complete
            return
        raw, _ = self.raw_scores(np.asarray(X)[wanted], envs[wanted], running,
                                 None if ids is None else np.asarray(ids)[wanted])
        self.observe_scores(raw, envs[wanted], score_stats)

    def score_stream(self, X: np.ndarray, envs, chunk: int = STREAM_CHUNK, ids=None,
                     known: BundleScores | None = None) -> BundleScores:
        """Score rows as a stream delivers them and the store keeps them: in order,
        `chunk` at a time, each chunk scored with the statistics of the rows stored
        before it, then stored (its rows join their cameras' embedding and score
        statistics). Used by evaluations to score a test set the way Score would
        (`ids`: the rows' ids, as Score passes them). `known`: the stream scores of the
        same rows in the same order by a bundle of the same fit under another score
        adaptation; their raw scores are reused instead of running the detectors again."""
        envs = np.asarray(envs).astype(str)
        stats = EnvStatistics(None, X.shape[1])
        score_stats = self.new_score_statistics()
        parts = []
        for start in range(0, len(X), chunk):
            rows = slice(start, start + chunk)
            row_ids = None if ids is None else ids[rows]
            known_raw = None if known is None else (
                {name: values[rows] for name, values in known.raw.items()},
                known.adaptation[rows])
            scored = self.score(X[rows], envs[rows], stats.get, score_stats, row_ids,
                                known_raw)
            parts.append(scored)
            self.observe_scores(scored.raw, envs[rows], score_stats)
            stats.update(envs[rows], X[rows])
        return BundleScores.concat(parts)

    def info(self) -> BundleInfo:
        """The plain record of this bundle that GetInfo and Fit report."""
        spec = self.fit_filter or {}
        return BundleInfo(
            bundle_id=self.bundle_id, model_id=self.model_id, detectors=tuple(self.detectors),
            n_samples=int(self.n_samples), n_features=int(self.n_features),
            threshold=float(self.threshold), created=str(self.created),
            filter=RowFilter(envs=tuple(spec.get("envs", ())),
                             splits=tuple(spec.get("splits", ())),
                             labels=tuple(spec.get("labels", ()))),
            stats=tuple(DetectorFitStats(name, float(s["fit_seconds"]), int(s["n_samples"]))
                        for name, s in self.stats.items()),
            space=self.space.describe(), score_adaptation=self.score_adaptation.describe(),
            calibration=self.calibration,
            fit_groups="" if self.fit_groups is None else self.fit_groups.describe())


def _detector_input(name: str, embeddings: np.ndarray, X: np.ndarray, X32: np.ndarray
                    ) -> np.ndarray:
    """What detector `name` scores: the raw embeddings (`reads_raw`), else the space
    step's output in the detector's precision."""
    spec = registry.get(name)
    if spec.reads_raw:
        return embeddings
    return X32 if spec.float32 else X


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


@dataclass(frozen=True)
class FitSpec:
    """How to fit a bundle: every option of `fit_bundle` that is not the rows themselves.

    `detectors` empty: the paper's eight. More than `max_samples` rows are sampled
    (`fit_sample`, seeded by `seed`); `calibration_fraction` of the fitting rows are held
    out for calibration; `contamination` sets the threshold; `stylist_drop_fraction`
    None: no Stylist step; `space` and `min_camera_rows`: the space step (geometry.py,
    `auto` chooses one); `score_adaptation`: how scores adapt to each camera at score
    time (score_adaptation.py); `model_id` and `fit_filter` are recorded in the bundle."""

    detectors: tuple[str, ...] = ()
    seed: int = 0
    contamination: float = DEFAULT_CONTAMINATION
    max_samples: int = FIT_MAX_SAMPLES
    stylist_drop_fraction: float | None = None
    calibration_fraction: float = DEFAULT_CALIBRATION_FRACTION
    space: str | EmbeddingSpace = "raw"
    min_camera_rows: int = DEFAULT_MIN_CAMERA_ROWS
    score_adaptation: str | ScoreAdaptation = "none"
    model_id: str = ""
    fit_filter: Mapping[str, Any] = field(default_factory=dict)
    progress: bool = False

    def detector_names(self) -> list[str]:
        """The detectors to fit, checked: registered, none twice."""
        names = list(self.detectors) if self.detectors else list(registry.PAPER_DETECTORS)
        for name in names:
            registry.get(name)
        if len(set(names)) != len(names):
            raise InvalidInput(f"detector names repeat: {names}")
        return names

    def check(self, n_rows: int) -> None:
        """Refuse options out of range, and fewer than MIN_SAMPLES rows."""
        if not 0.0 < self.contamination < 1.0:
            raise InvalidInput(f"contamination must be in (0, 1), got {self.contamination}")
        if not 0.0 < self.calibration_fraction < 1.0:
            raise InvalidInput("calibration_fraction must be in (0, 1), got "
                               f"{self.calibration_fraction}")
        if self.max_samples < MIN_SAMPLES:
            raise InvalidInput(f"max_samples must be at least {MIN_SAMPLES}")
        if n_rows < MIN_SAMPLES:
            raise InvalidInput(f"need at least {MIN_SAMPLES} rows to fit detectors, got {n_rows}")

    def adaptation(self) -> ScoreAdaptation:
        if isinstance(self.score_adaptation, ScoreAdaptation):
            return self.score_adaptation
        return parse_score_adaptation(self.score_adaptation)


def fit_sample(rows: int, max_samples: int, seed: int) -> np.ndarray:
    """Positions (sorted) of the rows a bundle fitted on `rows` rows with this cap and
    seed uses: all of them up to `max_samples`, else a seeded sample. The sample has a
    random stream of its own (the calibration split draws from `seed` itself), so a
    caller that reads only these rows and fits on them gets the bundle all rows give."""
    if rows <= max_samples:
        return np.arange(rows)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    return np.sort(rng.choice(rows, size=max_samples, replace=False))


def fit_bundle(X: np.ndarray, spec: FitSpec | None = None, *, envs: np.ndarray | None = None,
               labels: np.ndarray | None = None, ids=None,
               groups: FitGroups | None = None) -> DetectorBundle:
    """Fit the space step and `spec`'s detectors on embeddings X of normal images from
    cameras `envs` with content `labels` (both optional unless the space needs them;
    rows labelled ANOMALY_LABEL and their groups are never fit on, reviewed.py).
    `ids` (one per row of X) let Score recognise the fit rows and leave each one's
    group out (leave_out.py): `groups` holds the rows' groups (events; every id of X
    among its members), None makes each row a group of its own. `spec` None: FitSpec()'s
    defaults."""
    spec = spec or FitSpec()
    X = _check_matrix(X)
    names = spec.detector_names()
    if envs is not None:
        envs = np.asarray(envs).astype(str)
        if len(envs) != len(X):
            raise InvalidInput(f"{len(envs)} environments for {len(X)} rows")
    ids = _checked_ids(ids, len(X), groups)
    rows = fit_sample(len(X), spec.max_samples, spec.seed)
    embeddings = X[rows]   # the fitting rows as the encoder gave them
    envs = None if envs is None else envs[rows]
    labels = None if labels is None else np.asarray(labels).astype(str)[rows]
    if ids is not None:
        ids = ids[rows]
        groups = groups or FitGroups.of_members(ids, np.arange(len(ids)), 0.0)
    codes = None if ids is None or groups is None else groups.codes_of(ids)
    normal = ~known_anomalies(labels, codes) if labels is not None else np.ones(len(rows), bool)
    spec.check(int(normal.sum()))
    fitted_space, space_scores = _fit_space(
        spec.space, embeddings[normal], _at(envs, normal), _at(labels, normal),
        spec.min_camera_rows, spec.seed)
    data, _ = fitted_space.transform(embeddings, envs)
    kept = None
    if spec.stylist_drop_fraction is not None:
        if envs is None:
            raise InvalidInput("Stylist feature selection needs the rows' environments")
        kept = select_features(data[normal], envs[normal], spec.stylist_drop_fraction)
        data = data[:, kept]
    split = _split(len(data), spec, normal)
    fit_groups = None if ids is None or groups is None else groups.with_fit_rows(ids[split.fit])
    detectors = _fit_detectors(names, data, embeddings, split, spec, fit_groups,
                               None if ids is None else ids[split.cal])
    unseen = (_unseen_camera(names, data, embeddings, split, envs, spec.seed)
              if spec.adaptation().unseen_prior and envs is not None else None)
    bundle = DetectorBundle(
        bundle_id=_bundle_id(data, names, spec.seed), model_id=spec.model_id,
        detectors=names, fitted=detectors.fitted, reference=detectors.reference,
        threshold=detectors.threshold(spec.contamination),
        contamination=spec.contamination, n_samples=int(normal.sum()), n_features=X.shape[1],
        kept_features=kept, stats=detectors.stats,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        fit_filter=dict(spec.fit_filter), seed=spec.seed, space=fitted_space,
        space_scores=space_scores, score_adaptation=spec.adaptation(),
        calibration=DEFAULT_CALIBRATION, fit_groups=fit_groups,
        reviewed=ReviewMemory.of(data, labels, envs, codes, spec.seed),
        unseen_camera=unseen,
    )
    bundle._calibrations.update(detectors.calibrations)   # built once, not again at scoring
    return bundle


def _at(values: np.ndarray | None, rows: np.ndarray) -> np.ndarray | None:
    return None if values is None else values[rows]


@dataclass(frozen=True)
class _Split:
    """Positions of the fitting rows that fit the detectors, and of those held out."""

    fit: np.ndarray
    cal: np.ndarray


def _split(n_rows: int, spec: FitSpec, usable: np.ndarray | None = None) -> _Split:
    """The seeded fit / calibration split of `n_rows` fitting rows, less the rows not
    `usable` (known anomalies): drawn over all of them, so labelling a row new content
    moves no other row between the parts."""
    shuffled = np.random.default_rng(spec.seed).permutation(n_rows)
    n_cal = max(int(round(spec.calibration_fraction * n_rows)), MIN_SAMPLES // 2)
    fit, cal = shuffled[n_cal:], shuffled[:n_cal]
    if usable is not None:
        fit, cal = fit[usable[fit]], cal[usable[cal]]
    return _Split(fit=fit, cal=cal)


@dataclass
class _FittedDetectors:
    fitted: dict[str, registry.Detector]
    reference: dict[str, np.ndarray]
    stats: dict[str, dict]
    calibrations: dict[str, Calibration]
    cal_ensemble: np.ndarray

    def threshold(self, contamination: float) -> float:
        """The (1 - contamination) quantile of the held-out ensemble scores."""
        threshold = float(np.quantile(self.cal_ensemble, 1.0 - contamination))
        return min(max(threshold, 1e-9), 1.0)


def _fit_detectors(names: list[str], data: np.ndarray, embeddings: np.ndarray,
                   split: _Split, spec: FitSpec, fit_groups: FitGroups | None,
                   cal_ids: np.ndarray | None) -> _FittedDetectors:
    """Fit each detector on the fit part and score the held-out part with it, each
    held-out row without its group (`fit_groups`, leave_out.py; the ones that cannot
    leave rows out by themselves are cross-fitted on the groups)."""
    fit_codes = None if fit_groups is None else fit_groups.fit_codes
    cal_leave_out = None if fit_groups is None else fit_groups.leave_out(cal_ids)
    # (fit part, calibration part) in the space step's output, and of the raw embeddings
    # for the detectors that read those (split once, by the same rows)
    parts = {False: (data[split.fit], data[split.cal])}
    if any(registry.get(name).reads_raw for name in names):
        parts[True] = (embeddings[split.fit], embeddings[split.cal])
    out = _FittedDetectors({}, {}, {}, {}, np.zeros(len(split.cal)))
    for name in tqdm(names, desc="fitting detectors", disable=not spec.progress):
        fit_part, cal_part = parts[registry.get(name).reads_raw]
        start = time.perf_counter()
        out.fitted[name] = registry.Detector(name, spec.seed).fit(fit_part, fit_codes)
        out.stats[name] = {"fit_seconds": time.perf_counter() - start,
                           "n_samples": len(fit_part)}
        held_out = out.fitted[name].score(cal_part, cal_leave_out)
        out.reference[name] = np.sort(held_out)
        out.calibrations[name] = Calibration.of(out.reference[name], DEFAULT_CALIBRATION)
        out.cal_ensemble += out.calibrations[name](held_out) / len(names)
    return out


def _unseen_camera(names: list[str], data: np.ndarray, embeddings: np.ndarray,
                   split: _Split, envs: np.ndarray, seed: int) -> UnseenCameraPrior | None:
    """How a camera left out of the fit part scores, for each detector
    (unseen_camera.py), from the same split the bundle's detectors were fitted on."""
    inputs = []
    for name in names:
        source = embeddings if registry.get(name).reads_raw else data
        inputs.append((source[split.fit], source[split.cal]))
    return unseen_camera.measure([_fitter(name, seed) for name in names], inputs,
                                 envs[split.fit], envs[split.cal], seed)


def _fitter(name: str, seed: int) -> unseen_camera.FitDetector:
    """Fits detector `name` on the rows it is given, returns its scorer."""
    def fit(rows: np.ndarray):
        fitted = registry.Detector(name, seed).fit(rows)
        return lambda queries: fitted.score(queries, None)
    return fit


def _checked_ids(ids, n_rows: int, groups: FitGroups | None) -> np.ndarray | None:
    """The fit rows' ids as a unicode array (None when not given), checked against the
    rows and `groups`."""
    if ids is None:
        if groups is not None:
            raise InvalidInput("fit groups need the fit rows' ids")
        return None
    ids = np.asarray(ids).astype(str)
    if len(ids) != n_rows:
        raise InvalidInput(f"{len(ids)} ids for {n_rows} rows")
    return ids


def _fit_space(space: str | EmbeddingSpace, X: np.ndarray, envs: np.ndarray | None,
               labels: np.ndarray | None, min_camera_rows: int, seed: int
               ) -> tuple[EmbeddingSpace, dict[str, float]]:
    """The fitted space step (choosing it first for `auto`) and the proxy scores."""
    scores: dict[str, float] = {}
    if isinstance(space, EmbeddingSpace):
        chosen = space
    elif space == AUTO_SPACE:
        if envs is not None and labels is not None and usable_for_selection(envs, labels):
            choice = choose_space(X, envs, labels, seed=seed, min_camera_rows=min_camera_rows)
            chosen, scores = choice.space, choice.scores
        else:
            chosen = parse_space(FALLBACK_SPACE, min_camera_rows=min_camera_rows)
    else:
        chosen = parse_space(space or "raw", min_camera_rows=min_camera_rows)
    if chosen.name == "style_l2" and (envs is None or len(set(envs)) < 2):
        raise InvalidInput("space style_l2 needs fitting rows from at least 2 cameras (env)")
    if chosen.camera_aware and envs is None:
        raise InvalidInput(f"space {chosen.name} needs each fitting row's camera (env)")
    return chosen.fit(X, envs), scores
