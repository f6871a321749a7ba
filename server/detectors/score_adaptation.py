"""Per-camera score standardisation: each camera's detector scores on the fit set's scale.

A new camera's style moves every embedding away from the fit rows, so all its images
score higher, normal ones included; in a ranking over several cameras its normal images
crowd out the other cameras' anomalies. With `camera[:P]` each detector's raw score `s`
of an image from camera c is mapped onto the fit set's scale,

    mu_fit + sd_fit * (s - mu_c) / sd_c,

where mu_fit and sd_fit are the mean and standard deviation of the detector's held-out
calibration scores (the bundle's reference), and mu_c, sd_c those of the scores camera c
has received so far, this image's batch included, shrunk toward the fit set's by a prior
of P rows: mu_c = (sum_c + P mu_fit) / (n_c + P), and E_c[s^2] likewise. A camera's first
images are scored almost as the fit set would score them; after P images its own
statistics weigh half (`camera_weight` = n_c / (n_c + P)). The adapted score is then
calibrated against the reference as before, so the threshold keeps its meaning: an image
is flagged when it is unusual for its own camera.

It assumes that most of a camera's images are normal content (true of camera traps,
where new species, people and vehicles are rare); a camera that mostly sees anomalies
raises its own baseline: reset its statistics or fit with `none`. A camera's statistics
belong to one bundle (its scale); a new Fit starts them afresh.

Rows without a camera (empty env) are not adapted. `none` leaves every score as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from envad.errors import InvalidInput
from envad.server.detectors.geometry import CameraStats

NONE = "none"
CAMERA = "camera"
#: prior weight of the fit set's statistics, in rows: chosen by `envad select` on
#: PhotoDigits' training cameras (each fold's held-out camera pooled with the other
#: cameras' val images, in three mixes of anomaly shares;
#: docs/results/selection-score-adaptation/): 0.859 against 0.841 for 16 and 0.774
#: unadapted
DEFAULT_PRIOR_ROWS = 64
#: a camera's standard deviation is at least this fraction of the fit set's (a camera
#: whose first images score alike must not blow its later scores up)
MIN_SCALE_FRACTION = 1e-3


@dataclass(frozen=True)
class ReferenceMoments:
    """Mean and standard deviation of each detector's reference scores (the fit set's
    scale), in the order of the detectors they were taken for: fixed for a bundle, so
    taken once, not at every Score."""

    mean: np.ndarray
    sd: np.ndarray

    @classmethod
    def of(cls, reference: dict[str, np.ndarray], detectors: list[str]) -> ReferenceMoments:
        return cls(np.array([reference[name].mean() for name in detectors]),
                   np.array([reference[name].std() for name in detectors]))


@dataclass(frozen=True)
class ScoreAdaptation:
    """`none`, or `camera` with the prior weight of the fit set's statistics in rows."""

    prior_rows: int | None = None

    @property
    def enabled(self) -> bool:
        return self.prior_rows is not None

    def spec(self) -> str:
        """The text form, parsed back by `parse_score_adaptation`."""
        return NONE if self.prior_rows is None else f"{CAMERA}:{self.prior_rows}"

    def describe(self) -> str:
        """For provenance: `none` or `camera(prior_rows=16)`."""
        return NONE if self.prior_rows is None else f"{CAMERA}(prior_rows={self.prior_rows})"

    def statistics_of(self, raw: dict[str, np.ndarray], detectors: list[str]) -> np.ndarray:
        """Rows [s_1..s_k, s_1^2..s_k^2] that a camera's running statistics sum."""
        scores = np.stack([np.asarray(raw[name], dtype=np.float64) for name in detectors],
                          axis=1)
        return np.concatenate([scores, scores * scores], axis=1)

    def adapt(self, raw: dict[str, np.ndarray], fit: ReferenceMoments,
              detectors: list[str], envs, running: Callable[[str], CameraStats | None] | None
              ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(adapted scores per detector, camera weight per row). `fit`: the moments of
        the reference scores of `detectors`, in that order. `running(env)` gives a
        camera's count and mean of `statistics_of` rows; None, or an adaptation that is
        off, leaves the scores as they are with weight 0."""
        n_rows = len(next(iter(raw.values()))) if raw else 0
        weight = np.zeros(n_rows)
        if not self.enabled or running is None or envs is None:
            return {name: raw[name] for name in detectors}, weight
        prior = float(self.prior_rows or 0)
        fit_mean, fit_sd = fit.mean, fit.sd
        envs = np.asarray(envs).astype(str)
        adapted = {name: np.array(raw[name], dtype=np.float64) for name in detectors}
        k = len(detectors)
        for env in np.unique(envs):
            stats = running(str(env)) if env else None
            if stats is None or stats.count == 0:
                continue
            n = float(stats.count)
            mean = (n * stats.mean[:k] + prior * fit_mean) / (n + prior)
            second = (n * stats.mean[k:] + prior * (fit_sd ** 2 + fit_mean ** 2)) / (n + prior)
            sd = np.sqrt(np.maximum(second - mean ** 2, 0.0))
            sd = np.maximum(sd, MIN_SCALE_FRACTION * fit_sd)
            rows = envs == env
            weight[rows] = n / (n + prior)
            for j, name in enumerate(detectors):
                if fit_sd[j] > 0:     # a constant reference has no scale to map onto
                    adapted[name][rows] = (fit_mean[j] + fit_sd[j]
                                           * (adapted[name][rows] - mean[j]) / sd[j])
        return adapted, weight


def parse_score_adaptation(text: str | None) -> ScoreAdaptation:
    """`none`, `camera` (prior DEFAULT_PRIOR_ROWS) or `camera:P` (P >= 1 rows)."""
    name, _, value = (text or NONE).strip().partition(":")
    if name == NONE and not value:
        return ScoreAdaptation(None)
    if name == CAMERA:
        if not value:
            return ScoreAdaptation(DEFAULT_PRIOR_ROWS)
        try:
            prior = int(value)
        except ValueError:
            prior = 0
        if prior >= 1:
            return ScoreAdaptation(prior)
        raise InvalidInput(f"score adaptation {text!r}: the prior must be a whole number "
                           "of rows >= 1, as in camera:16")
    raise InvalidInput(f"unknown score adaptation {text!r}: use {NONE!r}, {CAMERA!r} or "
                       f"'{CAMERA}:P' (P rows of prior)")
