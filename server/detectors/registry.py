"""The detectors, behind one registry: the paper's eight pyod detectors with the paper's
settings (`PAPER_DETECTORS`), then envad's own.

Source of every paper setting: the paper's appendix "AD methods hyper-parameters" (arXiv
2210.03103). pyod 3.x defaults differ from the paper's (LOF k=20, INNE 200 estimators,
LODA 10 bins), so every non-default is passed explicitly. Higher score = more anomalous.

A factory imports its detector's module when it is called: those modules load pyod and
scikit-learn's estimators (0.4 s on a 2-core host), which the server needs only once a Fit
or a stored bundle names the detector.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from envad.errors import InvalidInput
from envad.pipeline import DEFAULT_PIPELINE
from envad.server.detectors.exact import ExactKDE, ExactKNN
from envad.server.detectors.leave_out import (
    CROSS_FIT_FOLDS,
    MIN_CROSS_FIT_ROWS,
    cross_fit_folds,
)
from envad.server.detectors.magnitude import FeatureMagnitude


@dataclass(frozen=True)
class DetectorSpec:
    """A registered detector: how to build its pyod estimator and how to feed it."""

    name: str
    factory: Callable[[int], Any]      # seed -> unfitted pyod estimator (untyped)
    uses_scaler: bool                  # standardise features before the estimator
    quadratic: bool                    # cost grows ~n^2 with the fit set (sample cap matters)
    description: str
    reference: Callable[[int], Any] | None = None  # pyod original, when factory is ours
    float32: bool = False              # scores float32 input (ranks equal float64's, tested)
    max_fit_rows: int | None = None    # fitted on a seeded sample of at most this many rows
    reads_raw: bool = False            # scores the encoder's own output, before the space step
    #: settings the pyod reference takes from envad's fitted estimator (KDE: the bandwidth
    #: it derived from the fit rows), so the two score alike on the same rows
    fitted_reference_params: Callable[[Any], dict] | None = None
    #: a loaded bundle maps its arrays from its file (persistence.py); False where the
    #: fitted state lives in structures the library copies on loading (scikit-learn's
    #: trees): mapping would only pin hundreds of small per-tree arrays, one mapping each
    mapped: bool = True

    @property
    def score_dtype(self) -> type:
        return np.float32 if self.float32 else np.float64

    def pyod_estimator(self, seed: int, fitted: Any = None):
        """The paper's pyod estimator (for checks and benchmarks against envad's own); given
        envad's `fitted` estimator, with the settings it derived from its fit rows."""
        estimator = (self.reference or self.factory)(seed)
        if fitted is not None and self.fitted_reference_params is not None:
            # built anew, not set_params: pyod's KDE makes its density object in __init__
            estimator = type(estimator)(**{**estimator.get_params(),
                                           **self.fitted_reference_params(fitted)})
        return estimator


_REGISTRY: dict[str, DetectorSpec] = {}


def unchecked_estimators() -> contextlib.AbstractContextManager:
    """scikit-learn's per-estimator input checks and parameter validation switched off,
    for rows the bundle has checked (shape, finite) once: those re-checks are most of a
    one-row call's cost. Where scikit-learn is not loaded, no estimator of it exists in
    the process, and there is nothing to switch off."""
    sklearn = sys.modules.get("sklearn")
    config_context = getattr(sklearn, "config_context", None)
    if config_context is None:
        return contextlib.nullcontext()
    return config_context(assume_finite=True, skip_parameter_validation=True)


def register(name: str, *, uses_scaler: bool, quadratic: bool, description: str,
             reference: Callable[[int], object] | None = None, float32: bool = False,
             max_fit_rows: int | None = None, reads_raw: bool = False,
             fitted_reference_params: Callable[[Any], dict] | None = None,
             mapped: bool = True):
    """Decorator adding a `seed -> estimator` factory to the registry; names are unique.

    `reference` is the pyod estimator the factory re-implements (scores must be equal);
    `float32`: the estimator scores float32 rows (the encoder's precision, no copy);
    `max_fit_rows`: a cap on the rows it is fitted on, for estimators that grow faster
    than linearly in them (a seeded sample above it); `reads_raw`: the detector scores the
    encoder's raw embedding whatever the bundle's space step is;
    `fitted_reference_params`, `mapped`: see DetectorSpec.
    """
    def decorate(factory: Callable[[int], object]) -> Callable[[int], object]:
        if name in _REGISTRY:
            raise ValueError(f"detector {name!r} is already registered")
        _REGISTRY[name] = DetectorSpec(name, factory, uses_scaler, quadratic, description,
                                       reference, float32, max_fit_rows, reads_raw,
                                       fitted_reference_params, mapped)
        return factory
    return decorate


def _pyod_isolation_forest(seed: int):
    from pyod.models.iforest import IForest  # pyod: when a check builds it
    return IForest(random_state=seed)


@register("IsoForest", uses_scaler=False, quadratic=False, reference=_pyod_isolation_forest,
          float32=True, mapped=False,
          description="isolation forest, 100 trees (pyod's fit, direct tree walks)")
def _isolation_forest(seed: int):
    from envad.server.detectors.iforest import DirectIForest  # pyod: once a Fit names it
    return DirectIForest(random_state=seed)


def _pyod_inne(seed: int):
    from pyod.models.inne import INNE  # pyod: when a check builds it
    return INNE(n_estimators=51, random_state=seed)


@register("INNE", uses_scaler=False, quadratic=False, reference=_pyod_inne,
          description="isolation using nearest-neighbour ensembles, 51 estimators "
                      "(pyod's fit, vectorised scoring)")
def _inne(seed: int):
    from envad.server.detectors.inne import VectorizedINNE  # pyod: once a Fit names it
    return VectorizedINNE(n_estimators=51, random_state=seed)


def _pyod_loda(seed: int):
    from pyod.models.loda import LODA  # pyod: when a check builds it
    return LODA(n_bins=25, n_random_cuts=100, random_state=seed)


@register("LODA", uses_scaler=True, quadratic=False, reference=_pyod_loda,
          description="lightweight on-line detector of anomalies, 25 bins, 100 random cuts "
                      "(pyod's fit, vectorised scoring)")
def _loda(seed: int):
    from envad.server.detectors.loda import VectorizedLODA  # pyod: once a Fit names it
    return VectorizedLODA(n_bins=25, n_random_cuts=100, random_state=seed)


#: OCSVM's fit grows with the square of its rows (38 s at 10,000 x 512 on 2 cores): above
#: this many rows it is fitted on a seeded sample (rank agreement: docs/detectors.md)
OCSVM_MAX_FIT_ROWS = 4096


def _pyod_ocsvm(seed: int):
    from pyod.models.ocsvm import OCSVM  # pyod: when a check builds it
    return OCSVM(gamma="auto")


@register("OCSVM", uses_scaler=True, quadratic=True, max_fit_rows=OCSVM_MAX_FIT_ROWS,
          reference=_pyod_ocsvm,
          description="one-class SVM, RBF kernel, gamma='auto' (fitted on at most "
                      "4,096 rows; libsvm's fit, vectorised scoring)")
def _ocsvm(seed: int):
    from envad.server.detectors.ocsvm import VectorizedOCSVM  # pyod: once a Fit names it
    return VectorizedOCSVM(gamma="auto")


def _pyod_pca(seed: int):
    from pyod.models.pca import PCA  # pyod: when a check builds it
    return PCA(standardization=False, whiten=True, random_state=seed)


@register("PCA", uses_scaler=True, quadratic=False, reference=_pyod_pca,
          description="PCA reconstruction, no standardisation inside, whiten=True (pyod's "
                      "fit, vectorised scoring)")
def _pca(seed: int):
    from envad.server.detectors.pca import VectorizedPCA  # pyod: once a Fit names it
    return VectorizedPCA(standardization=False, whiten=True, random_state=seed)


def _pyod_lof5(seed: int):
    from pyod.models.lof import LOF  # pyod: when a check builds it
    return LOF(n_neighbors=5, novelty=True, metric="euclidean")


@register("LOF5", uses_scaler=True, quadratic=True, reference=_pyod_lof5,
          description="local outlier factor, 5 neighbours, euclidean, novelty mode "
                      "(scikit-learn's fit, vectorised scoring)")
def _lof5(seed: int):
    from envad.server.detectors.lof import VectorizedLOF  # pyod: once a Fit names it
    return VectorizedLOF(n_neighbors=5, novelty=True, metric="euclidean")


def _pyod_knn(seed: int):
    from pyod.models.knn import KNN  # pyod: when a check builds it
    return KNN(n_neighbors=5, method="largest")


def _pyod_kde(seed: int):
    from pyod.models.kde import KDE  # pyod: when a check builds it
    return KDE(bandwidth=1.0)


@register("KNN", uses_scaler=False, quadratic=True, reference=_pyod_knn, float32=True,
          description="distance to the 5th nearest neighbour (FAISS, equal to pyod KNN())")
def _knn(seed: int):
    return ExactKNN(n_neighbors=5)


#: KDE's bandwidth in units of the fit rows' median 5th-neighbour distance
#: (exact.neighbour_scale), chosen on the training cameras' folds by `envad select`'s
#: criterion, clean and archive fits alike (docs/detectors.md: 0.25 scores best on clean
#: fits, but calls a burst of new content in the fit rows dense)
KDE_BANDWIDTH_FACTOR = 0.5


@register("KDE", uses_scaler=False, quadratic=True, reference=_pyod_kde,
          fitted_reference_params=lambda fitted: {"bandwidth": fitted.bandwidth_},
          description="Gaussian kernel density, bandwidth 0.5 x the fit rows' median "
                      "5th-neighbour distance (pyod KDE() fixes it at 1.0, which suits "
                      "no space step; exact log-space density over at most 10,000 fit rows)")
def _kde(seed: int):
    return ExactKDE(bandwidth=None, bandwidth_factor=KDE_BANDWIDTH_FACTOR, random_state=seed)


@register("NORM", uses_scaler=False, quadratic=False, reads_raw=True,
          description="feature magnitude: the raw embedding's L2 norm, shorter = more "
                      "anomalous (read before the space step; not in the paper)")
def _feature_magnitude(seed: int):
    return FeatureMagnitude()


#: the paper's Table 1 detectors, in its order: what a Fit or a grid gets when it names no
#: detector (envad's own, such as NORM, are opt-in)
PAPER_DETECTORS = ("IsoForest", "INNE", "LODA", "OCSVM", "PCA", "LOF5", "KNN", "KDE")


def default_fit_detectors() -> tuple[str, ...]:
    """What a Fit naming no detector fits: the default pipeline's detector set
    (envad/pipeline.py, chosen on training cameras; KNN alone today), or the paper's
    eight when the pipeline names none."""
    return DEFAULT_PIPELINE.detectors or PAPER_DETECTORS


def names() -> list[str]:
    """Registered detector names: the paper's eight in its order, then envad's own."""
    return list(_REGISTRY)


def settings(name: str) -> dict:
    """Everything that decides what detector `name` scores (its estimator's parameters,
    seed 0; its scaler; its fit-row cap), as plain data: a cache of scores keyed on it
    goes stale when a default changes."""
    spec = get(name)
    estimator = spec.factory(0)
    params = estimator.get_params() if hasattr(estimator, "get_params") else {}
    return {"params": params, "uses_scaler": spec.uses_scaler,
            "max_fit_rows": spec.max_fit_rows}


def settings_of(names) -> dict:
    """{name: settings(name)} for `names`, as JSON keeps it (what result caches store and
    compare with)."""
    return json.loads(json.dumps({name: settings(name) for name in names}))


def get(name: str) -> DetectorSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidInput(f"unknown detector {name!r}; known: {', '.join(names())}") from None


class Detector:
    """One registry detector as a scikit-learn style estimator (optional scaler + pyod)."""

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.seed = seed

    def fit(self, X: np.ndarray, groups: np.ndarray | None = None) -> Detector:
        """Fit on rows X. `groups` (the group code of each row, leave_out.FitGroups's
        `fit_codes`): a detector that cannot leave rows out by itself is also fitted
        once per cross-fit fold (leave_out.cross_fit_folds), without that fold's groups,
        so that `score` can score a fit row's group by a fit that never saw it."""
        spec = get(self.name)
        X = np.asarray(X, dtype=np.float64)
        self._fit_estimator(X, spec)
        self.folds_: list[Detector | None] | None = None
        if groups is not None and not self.leaves_out:
            fold = cross_fit_folds(np.asarray(groups, dtype=np.int64))
            if len(fold) != len(X):
                raise InvalidInput(f"{len(fold)} group codes for {len(X)} rows")
            # a fold whose other rows are too few to fit on keeps its groups on the whole
            # fit (the same for every seed and detector: no fit that fails on some data);
            # a fold without rows (fewer groups than folds) would be the whole fit again
            self.folds_ = [Detector(self.name, self.seed).fit(X[fold != k])
                           if (fold == k).any()
                           and np.count_nonzero(fold != k) >= MIN_CROSS_FIT_ROWS else None
                           for k in range(CROSS_FIT_FOLDS)]
        return self

    def _fit_estimator(self, X: np.ndarray, spec: DetectorSpec) -> None:
        if spec.max_fit_rows is not None and len(X) > spec.max_fit_rows:
            rng = np.random.default_rng(self.seed)
            X = X[np.sort(rng.choice(len(X), size=spec.max_fit_rows, replace=False))]
        self.scaler_ = None
        if spec.uses_scaler:
            # scikit-learn: once a Fit names a detector that standardises, so that a server
            # of the default pipeline never loads it (docs/scaling.md, the fixed part)
            from sklearn.preprocessing import StandardScaler
            self.scaler_ = StandardScaler().fit(X)
        self.estimator_ = spec.factory(self.seed).fit(self._scaled(X))

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        """StandardScaler.transform's arithmetic without its input checks (X is checked
        by the bundle), which cost more than the transform for one row."""
        if self.scaler_ is None:
            return X
        return (X - self.scaler_.mean_) / self.scaler_.scale_

    def score(self, X: np.ndarray, leave_out: tuple[np.ndarray, np.ndarray] | None = None
              ) -> np.ndarray:
        """Anomaly scores of X (float64, higher = more anomalous); X is read in the
        detector's own precision (`DetectorSpec.float32`). `leave_out`: (group code per
        row of X, group code per fit row) from leave_out.FitGroups: each row whose group
        holds fit rows is scored without them: against the fit rows outside its group
        (a detector that `leaves_out`), or by its group's cross-fit fold (`fit` with
        `groups`)."""
        spec = get(self.name)
        rows: np.ndarray = np.asarray(X, dtype=spec.score_dtype)
        if leave_out is not None and self.leaves_out:
            scores = self.estimator_.decision_function_leaving_out(self._scaled(rows),
                                                                   *leave_out)
            return np.asarray(scores, dtype=np.float64)
        folds = getattr(self, "folds_", None)   # None in a bundle saved before cross-fits
        if leave_out is None or folds is None:
            return self._whole_fit_scores(rows)
        codes, fit_codes = leave_out
        fold = np.where(np.isin(codes, fit_codes), cross_fit_folds(codes), -1)
        scores = np.empty(len(rows))
        by_whole_fit = np.ones(len(rows), dtype=bool)
        for k, fold_detector in enumerate(folds):
            at = fold == k
            if fold_detector is not None and at.any():
                scores[at] = fold_detector.score(rows[at])
                by_whole_fit &= ~at
        if by_whole_fit.any():   # each row scored once: by its fold's fit or the whole one
            scores[by_whole_fit] = self._whole_fit_scores(rows[by_whole_fit])
        return scores

    def _whole_fit_scores(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.estimator_.decision_function(self._scaled(rows)),
                          dtype=np.float64)

    @property
    def leaves_out(self) -> bool:
        """Whether this detector can leave a fit row's group out when scoring it by
        itself (its estimator saw every fit row, in order: no fit-row cap); the others
        are cross-fitted when fitted with groups."""
        return (get(self.name).max_fit_rows is None
                and hasattr(self.estimator_, "decision_function_leaving_out"))
