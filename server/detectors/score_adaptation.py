"""Per-camera score standardisation: each camera's detector scores on the fit set's scale.

A new camera's style moves every embedding away from the fit rows, so all its images
score higher, normal ones included; in a ranking over several cameras its normal images
crowd out the other cameras' anomalies. With an adaptation each detector's raw score `s`
of an image from camera c is mapped onto the fit set's scale,

    loc_fit + scale_fit * (s - loc_c) / scale_c,

where loc_fit and scale_fit are the location and scale of the detector's held-out
calibration scores (the bundle's reference), and loc_c, scale_c those of the scores of
camera c's **stored** rows, shrunk toward the fit set's by a prior of P rows of the
reference. A camera's first images are scored almost as the fit set would score them;
after P stored images its own statistics weigh half (`camera_weight` = n_c / (n_c + P)).
The adapted score is then calibrated against the reference as before, so the threshold
keeps its meaning: an image is flagged when it is unusual for its own camera.

The statistics (the spec's name):

- `camera:P`: mean and standard deviation (their running sums);
- `median:P`: median and median absolute deviation, read from a per-camera histogram
  of the scores (STAT_BINS bins per detector, uniform in asinh of the score's z value
  against the reference, so fine near the fit scale and wide far from it; the histogram
  is a sum, so it is kept durable like the means). A run of new content moves a median
  less than a mean, and its scale hardly at all;
- `gated:P`: the median's, with a camera's rows taken into a detector's histogram only
  while that detector scores them as normal for the camera (adapted robust z below
  GATE_Z) once the camera has P rows: new content that arrives in runs (a herd, a
  parked vehicle) does not teach the camera that it is normal;
- `frozen:P`: the mean's, taken from the camera's first FROZEN_AFTER x P stored rows
  and then kept: whatever arrives later cannot move them (a camera moved or re-aimed
  starts again with ResetCameraStats);
- `low:P`: from the median's histogram, the LOW_QUANTILE quantile as the location and
  its distance down to the LOW_SPREAD_QUANTILE quantile as the scale (each mapped onto
  the reference's same quantiles). New content scores high, so it moves a camera's low
  quantiles only once it is most of the camera's images: a run of it, even one that
  makes up half of a short stream, hardly moves them. The prior weighs the camera's
  quantiles and the reference's n : P (not the two histograms pooled). `low:P:N` keeps
  a camera's first N stored rows only, as `frozen` does.

`camera:P+unseen`, `frozen:P+unseen` and `low:P+unseen` shrink a camera outside the fit
set toward how an unseen camera scores (measured by leaving the fit set's cameras out,
unseen_camera.py) instead of toward the fit set: a new camera's first images, before
its own statistics weigh, are already scored as a new camera's, not as fit rows.
Any statistic with `+shift` (last) adapts the location only: a camera's scores are moved
onto the fit set's location and keep the fit set's scale.

**Score never changes the statistics.** They are built from what is stored: the writer
hands every committed row to `observe` (server/space.py), and a new bundle starts from
the camera's stored rows. A Score call therefore changes nothing another call's result
depends on, and two replicas at one table version agree.

It assumes that most of a camera's stored images are normal content (true of camera
traps, where new species, people and vehicles are rare); a camera that mostly sees
anomalies raises its own baseline: reset its statistics or fit with `none`. A camera's
statistics belong to one bundle (its scale).

Rows without a camera (empty env) are not adapted. `none` leaves every score as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from envad.errors import InvalidInput
from envad.server.detectors.geometry import CameraStats
from envad.server.detectors.unseen_camera import UnseenCameraPrior

NONE = "none"
MEAN = "camera"
MEDIAN = "median"
GATED = "gated"
FROZEN = "frozen"
LOW = "low"
STATISTICS = (MEAN, MEDIAN, GATED, FROZEN, LOW)
#: `low:P`: a camera's location is this quantile of its scores, its scale the distance
#: down to LOW_SPREAD_QUANTILE (each against the reference's same quantiles)
LOW_QUANTILE = 0.25
LOW_SPREAD_QUANTILE = 0.05
#: `frozen:P`: a camera's statistics are those of its first FROZEN_AFTER x P stored rows
FROZEN_AFTER = 4
#: `camera:P+unseen`, `frozen:P+unseen`, `low:P+unseen`: a camera outside the fit set is
#: shrunk toward how an unseen camera scores (unseen_camera.py), not toward the fit set
UNSEEN_SUFFIX = "+unseen"
#: `...+shift` (after `+unseen` when both): only a camera's location is adapted; its
#: scores keep the fit set's scale (a scale read from a camera's first images, or from a
#: run of new content among them, does not stretch or squeeze its later scores)
SHIFT_SUFFIX = "+shift"
#: prior weight of the fit set's statistics, in rows: chosen with the statistic by
#: `envad select` on the training cameras of two content families (each fold's held-out
#: camera pooled with the other cameras' val images, in every anomaly-share mix and
#: every arrival order of envad/arrival_orders.py, judged by the worst;
#: docs/results/selection-orders/): `frozen:64` 0.632, `camera:64` 0.631, `frozen:16`
#: 0.631, `frozen:64:64` 0.610
DEFAULT_PRIOR_ROWS = 64
#: a camera's scale is at least this fraction of the fit set's (a camera whose first
#: images score alike must not blow its later scores up)
MIN_SCALE_FRACTION = 1e-3
#: histogram bins per detector of the median statistics, uniform in asinh(z) over
#: [ASINH_LOW, ASINH_HIGH] (z = (s - mean_fit) / sd_fit): 0.055 sd wide at the fit
#: scale, z from about -200 to +1500 covered; outside, the end bins
STAT_BINS = 256
ASINH_LOW, ASINH_HIGH = -6.0, 8.0
#: `gated`: a camera's row joins its statistics only when its adapted robust z value
#: (median and 1.4826 MAD of the reference) is below this
GATE_Z = 3.0
MAD_TO_SD = 1.4826


def _edges() -> np.ndarray:
    return np.linspace(ASINH_LOW, ASINH_HIGH, STAT_BINS + 1)


def _bin_of(z: np.ndarray) -> np.ndarray:
    u = np.arcsinh(z)
    width = (ASINH_HIGH - ASINH_LOW) / STAT_BINS
    return np.clip(((u - ASINH_LOW) / width).astype(np.int64), 0, STAT_BINS - 1)


def _histogram_quantile(weights: np.ndarray, q: float) -> float:
    """The `q` quantile, in z units, of a histogram over the asinh bins (linear within
    its bin)."""
    edges = _edges()
    cumulative = np.cumsum(weights)
    wanted = q * cumulative[-1]
    b = min(int(np.searchsorted(cumulative, wanted)), STAT_BINS - 1)
    before = cumulative[b - 1] if b > 0 else 0.0
    inside = (wanted - before) / weights[b] if weights[b] > 0 else 0.5
    return float(np.sinh(edges[b] + inside * (edges[b + 1] - edges[b])))


def _histogram_low_location_scale(weights: np.ndarray) -> tuple[float, float]:
    """`low`'s location (LOW_QUANTILE) and scale (down to LOW_SPREAD_QUANTILE), in z
    units: new content scores high, so a camera's low quantiles stay those of its normal
    images until most of its images are new content."""
    location = _histogram_quantile(weights, LOW_QUANTILE)
    return location, location - _histogram_quantile(weights, LOW_SPREAD_QUANTILE)


def _histogram_location_scale(weights: np.ndarray) -> tuple[float, float]:
    """Median and MAD, in z units, of a histogram over the asinh bins (linear within
    the median's bin; the MAD from the bin centres)."""
    edges = _edges()
    total = weights.sum()
    median = _histogram_quantile(weights, 0.5)
    centres = np.sinh((edges[:-1] + edges[1:]) / 2.0)
    deviation = np.abs(centres - median)
    order = np.argsort(deviation)
    running = np.cumsum(weights[order])
    mad = float(deviation[order][min(int(np.searchsorted(running, total / 2.0)),
                                     STAT_BINS - 1)])
    return median, mad


@dataclass(frozen=True)
class ReferenceMoments:
    """Mean and standard deviation of each detector's reference scores (the fit set's
    scale), in the order of the detectors they were taken for, and the reference's
    histogram, median, MAD and `low` location and scale in z units (z = (s - mean) / sd):
    fixed for a bundle, so taken once, not at every Score."""

    mean: np.ndarray
    sd: np.ndarray
    histogram: np.ndarray          # [k, STAT_BINS], each row sums to 1
    median_z: np.ndarray
    mad_z: np.ndarray
    low_z: np.ndarray              # [k, 2]: `low`'s location and scale of the histogram
    #: how a camera the detectors never saw scores (unseen_camera.py; None: unknown), and
    #: the fit set's cameras, which keep the fit set's own prior
    unseen: UnseenCameraPrior | None = None
    fit_cameras: frozenset[str] = frozenset()

    @classmethod
    def of(cls, reference: dict[str, np.ndarray], detectors: list[str],
           unseen_camera: UnseenCameraPrior | None = None) -> ReferenceMoments:
        mean = np.array([reference[name].mean() for name in detectors])
        sd = np.array([reference[name].std() for name in detectors])
        histogram = np.zeros((len(detectors), STAT_BINS))
        median_z, mad_z = np.zeros(len(detectors)), np.ones(len(detectors))
        for j, name in enumerate(detectors):
            z = (np.asarray(reference[name], np.float64) - mean[j]) / (sd[j] or 1.0)
            histogram[j] = np.bincount(_bin_of(z), minlength=STAT_BINS) / max(len(z), 1)
            median_z[j] = float(np.median(z)) if len(z) else 0.0
            mad_z[j] = float(np.median(np.abs(z - median_z[j]))) if len(z) else 1.0
        cameras = frozenset(unseen_camera.cameras) if unseen_camera else frozenset()
        low_z = np.array([_histogram_low_location_scale(h) for h in histogram]).reshape(-1, 2)
        return cls(mean, sd, histogram, median_z, np.maximum(mad_z, MIN_SCALE_FRACTION),
                   low_z, unseen_camera, cameras)

    def unseen_for(self, env: str) -> UnseenCameraPrior | None:
        """The unseen-camera prior camera `env` takes (when one is asked for): the prior,
        when it is known and `env` is not one of the fit set's cameras; else None."""
        return self.unseen if env and env not in self.fit_cameras else None

    def prior_for(self, env: str, unseen_prior: bool) -> tuple[np.ndarray, np.ndarray]:
        """The (mean, sd) a camera's statistics are shrunk toward: an unseen camera's
        (`unseen_prior` and `unseen_for`), else the fit set's own."""
        unseen = self.unseen_for(env) if unseen_prior else None
        if unseen is None:
            return self.mean, self.sd
        return self.mean + unseen.shift * self.sd, self.sd * unseen.spread

    def z(self, j: int, scores: np.ndarray) -> np.ndarray:
        return (np.asarray(scores, np.float64) - self.mean[j]) / (self.sd[j] or 1.0)


@dataclass(frozen=True)
class ScoreAdaptation:
    """`none`, or a statistic (`camera` = mean/sd, `median`, `gated`) with the prior
    weight of the fit set's statistics in rows."""

    prior_rows: int | None = None
    statistic: str = MEAN
    frozen_rows: int | None = None    # `frozen`: rows kept (None: FROZEN_AFTER x prior)
    gate_z: float | None = None       # `gated`: the gate (None: GATE_Z)
    unseen_prior: bool = False        # `+unseen`: a new camera's prior (unseen_camera.py)
    shift_only: bool = False          # `+shift`: the location adapted, the scale kept

    @property
    def enabled(self) -> bool:
        return self.prior_rows is not None

    def spec(self) -> str:
        """The text form, parsed back by `parse_score_adaptation`."""
        if self.prior_rows is None:
            return NONE
        rows = f":{self.frozen_rows}" if self.frozen_rows is not None else ""
        gate = f":{self.gate_z:g}" if self.gate_z is not None else ""
        unseen = UNSEEN_SUFFIX if self.unseen_prior else ""
        shift = SHIFT_SUFFIX if self.shift_only else ""
        return f"{self.statistic}:{self.prior_rows}{rows}{gate}{unseen}{shift}"

    def describe(self) -> str:
        """For provenance: `none` or `camera(prior_rows=16)`."""
        if self.prior_rows is None:
            return NONE
        rows = f", rows={self.frozen_rows}" if self.frozen_rows is not None else ""
        gate = f", gate={self.gate_z:g}" if self.gate_z is not None else ""
        unseen = ", prior=unseen camera" if self.unseen_prior else ""
        shift = ", location only" if self.shift_only else ""
        return f"{self.statistic}(prior_rows={self.prior_rows}{rows}{gate}{unseen}{shift})"

    def dim(self, n_detectors: int) -> int:
        """Length of the per-row statistics vector a camera's running sums add up."""
        return (2 if self.statistic in (MEAN, FROZEN) else STAT_BINS) * n_detectors

    def statistics_of(self, raw: dict[str, np.ndarray], detectors: list[str],
                      fit: ReferenceMoments | None = None) -> np.ndarray:
        """Rows that a camera's running statistics sum: [s_1..s_k, s_1^2..s_k^2] for
        the mean, one-hot histogram bins per detector for the median (needs `fit`)."""
        scores = np.stack([np.asarray(raw[name], dtype=np.float64) for name in detectors],
                          axis=1)
        if self.statistic in (MEAN, FROZEN):
            return np.concatenate([scores, scores * scores], axis=1)
        assert fit is not None, "the median statistics bin scores against the reference"
        rows = np.zeros((len(scores), len(detectors) * STAT_BINS))
        for j in range(len(detectors)):
            rows[np.arange(len(scores)), j * STAT_BINS + _bin_of(fit.z(j, scores[:, j]))] = 1.0
        return rows

    def location_scale(self, stats: CameraStats, fit: ReferenceMoments, env: str = ""
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Camera `env`'s (location, scale) per detector in score units, shrunk toward
        the prior: (mean, sd) of the fit set's reference for the mean (an unseen
        camera's, `fit.prior_for`, with `unseen_prior`), (median, MAD) of the reference
        for the others."""
        n, prior = float(stats.count), float(self.prior_rows or 0)
        k = len(fit.mean)
        if self.statistic in (MEAN, FROZEN):
            prior_mean, prior_sd = fit.prior_for(env, self.unseen_prior)
            mean = (n * stats.mean[:k] + prior * prior_mean) / (n + prior)
            second = (n * stats.mean[k:] + prior * (prior_sd ** 2 + prior_mean ** 2)) / (n + prior)
            sd = np.sqrt(np.maximum(second - mean ** 2, 0.0))
            return mean, np.maximum(sd, MIN_SCALE_FRACTION * fit.sd)
        location, scale = np.zeros(k), np.zeros(k)
        for j in range(k):
            # the block's own total: `gated` leaves rows out of one detector's block
            own = stats.mean[j * STAT_BINS:(j + 1) * STAT_BINS]
            if self.statistic == LOW:
                # the camera's quantiles and the reference's, weighed n : P (quantiles
                # of the two histograms pooled would span both when the camera is moved)
                fit_z = fit.low_z[j]
                unseen = fit.unseen_for(env) if self.unseen_prior else None
                prior_z = fit_z if unseen is None else (fit_z[0] + unseen.shift[j],
                                                        fit_z[1] * unseen.spread[j])
                camera_z = _histogram_low_location_scale(own) if n > 0 else prior_z
                w = n / (n + prior)
                location_z = w * camera_z[0] + (1.0 - w) * prior_z[0]
                scale_z = w * camera_z[1] + (1.0 - w) * prior_z[1]
                floor = MIN_SCALE_FRACTION * fit_z[1]
            else:
                location_z, scale_z = _histogram_location_scale(
                    n * own + prior * fit.histogram[j])
                floor = MIN_SCALE_FRACTION * fit.mad_z[j]
            location[j] = fit.mean[j] + fit.sd[j] * location_z
            scale[j] = fit.sd[j] * max(scale_z, floor)
        return location, scale

    def _fit_location_scale(self, fit: ReferenceMoments) -> tuple[np.ndarray, np.ndarray]:
        if self.statistic in (MEAN, FROZEN):
            return fit.mean, fit.sd
        if self.statistic == LOW:
            return (fit.mean + fit.sd * fit.low_z[:, 0],
                    fit.sd * np.maximum(fit.low_z[:, 1], 1e-12))
        return fit.mean + fit.sd * fit.median_z, fit.sd * fit.mad_z

    def adapt(self, raw: dict[str, np.ndarray], fit: ReferenceMoments,
              detectors: list[str], envs, running: Callable[[str], CameraStats | None] | None
              ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(adapted scores per detector, camera weight per row); reads the statistics,
        never changes them. `fit`: the moments of the reference scores of `detectors`, in
        that order. `running(env)` gives a camera's count and mean of `statistics_of`
        rows; None, or an adaptation that is off, leaves the scores as they are with
        weight 0."""
        n_rows = len(next(iter(raw.values()))) if raw else 0
        weight = np.zeros(n_rows)
        if not self.enabled or running is None or envs is None:
            return {name: raw[name] for name in detectors}, weight
        prior = float(self.prior_rows or 0)
        fit_location, fit_scale = self._fit_location_scale(fit)
        envs = np.asarray(envs).astype(str)
        adapted = {name: np.array(raw[name], dtype=np.float64) for name in detectors}
        for env in np.unique(envs):
            stats = running(str(env)) if env else None
            if stats is None or stats.count == 0:
                if not self.unseen_prior or fit.unseen_for(str(env)) is None:
                    continue           # the fit set's prior alone maps nothing
                stats = CameraStats(0, np.zeros(self.dim(len(detectors))))
            location, scale = self.location_scale(stats, fit, str(env))
            if self.shift_only:
                scale = fit_scale
            rows = envs == env
            weight[rows] = stats.count / (stats.count + prior)
            for j, name in enumerate(detectors):
                if fit.sd[j] > 0:     # a constant reference has no scale to map onto
                    adapted[name][rows] = (fit_location[j] + fit_scale[j]
                                           * (adapted[name][rows] - location[j]) / scale[j])
        return adapted, weight

    @property
    def rows_per_camera(self) -> int | None:
        """How many of a camera's stored rows its statistics take at most (None: all)."""
        if self.statistic == LOW and self.frozen_rows is not None:
            return self.frozen_rows
        if self.statistic != FROZEN:
            return None
        return self.frozen_rows or FROZEN_AFTER * (self.prior_rows or 0)

    def wanted(self, envs, running: Callable[[str], CameraStats | None]) -> np.ndarray:
        """Which stored rows can still join their cameras' statistics (the others need
        not be scored): all of them but a frozen camera's beyond its first rows."""
        envs = np.asarray(envs).astype(str)
        keep = np.ones(len(envs), dtype=bool)
        limit = self.rows_per_camera
        if limit is None:
            return keep
        for env in np.unique(envs):
            stats = running(str(env)) if env else None
            seen = stats.count if stats is not None else 0
            members = np.flatnonzero(envs == env)
            keep[members[max(limit - seen, 0):]] = False
        return keep

    def observations(self, raw: dict[str, np.ndarray], fit: ReferenceMoments,
                     detectors: list[str], envs,
                     running: Callable[[str], CameraStats | None]
                     ) -> tuple[np.ndarray, np.ndarray]:
        """(which stored rows join their cameras' statistics, their `statistics_of`
        rows). `frozen`: only a camera's first FROZEN_AFTER x P rows join. `gated`: once
        a camera has `prior_rows` rows, a detector's histogram leaves out the rows that
        it scores above GATE_Z for that camera (its block of the row is zero), so that a
        run of new content does not become the camera's normal."""
        envs = np.asarray(envs).astype(str)
        keep = self.wanted(envs, running)
        rows = self.statistics_of({name: np.asarray(raw[name])[keep] for name in detectors},
                                  detectors, fit)
        if self.statistic != GATED:
            return keep, rows
        adapted, _ = self.adapt(raw, fit, detectors, envs, running)
        fit_location, fit_scale = self._fit_location_scale(fit)
        gate = GATE_Z if self.gate_z is None else self.gate_z
        for env in np.unique(envs):
            stats = running(str(env)) if env else None
            if stats is None or stats.count < (self.prior_rows or 0):
                continue
            members = np.flatnonzero(envs == env)
            for j, name in enumerate(detectors):
                robust_z = ((adapted[name][members] - fit_location[j])
                            / (MAD_TO_SD * max(fit_scale[j], 1e-12)))
                rows[members[robust_z > gate], j * STAT_BINS:(j + 1) * STAT_BINS] = 0.0
        return keep, rows


def parse_score_adaptation(text: str | None) -> ScoreAdaptation:
    """`none`, or `camera`, `median`, `gated`, `frozen`, `low` with an optional prior
    `:P` (P >= 1 rows; DEFAULT_PRIOR_ROWS when left out); `frozen:P:N` keeps a camera's
    first N stored rows (N >= 1; FROZEN_AFTER x P when left out), `low:P:N` likewise
    (every row when left out); `gated:P:Z` gates at Z robust standard deviations (Z > 0;
    GATE_Z when left out); `camera`, `frozen` and `low` take UNSEEN_SUFFIX, and every
    statistic SHIFT_SUFFIX (last)."""
    spec_text = (text or NONE).strip()
    shift = spec_text.endswith(SHIFT_SUFFIX)
    spec_text = spec_text.removesuffix(SHIFT_SUFFIX)
    unseen = spec_text.endswith(UNSEEN_SUFFIX)
    name, _, value = spec_text.removesuffix(UNSEEN_SUFFIX).partition(":")
    if name == NONE and not value and not unseen and not shift:
        return ScoreAdaptation(None)
    if unseen and name not in (MEAN, FROZEN, LOW):
        raise InvalidInput(f"score adaptation {text!r}: the unseen-camera prior "
                           f"({UNSEEN_SUFFIX}) goes with {MEAN}, {FROZEN} or {LOW}")
    if name in STATISTICS:
        if not value:
            return ScoreAdaptation(DEFAULT_PRIOR_ROWS, name, unseen_prior=unseen,
                                   shift_only=shift)
        prior_text, _, third = value.partition(":")
        prior = _whole(prior_text)
        rows = _whole(third) if third and name in (FROZEN, LOW) else None
        gate = _positive(third) if third and name == GATED else None
        if prior >= 1 and (not third or (rows or 0) >= 1 or (gate or 0) > 0):
            return ScoreAdaptation(prior, name, rows, gate, unseen, shift)
        raise InvalidInput(f"score adaptation {text!r}: the prior must be a whole number "
                           "of rows >= 1, as in camera:16 (frozen's rows a whole number "
                           ">= 1, as in frozen:16:256; gated's gate a number > 0, as in "
                           "gated:64:1.5)")
    raise InvalidInput(f"unknown score adaptation {text!r}: use {NONE!r} or one of "
                       f"{', '.join(STATISTICS)} with an optional ':P' (P rows of prior)")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return 0.0
    return value if np.isfinite(value) and value > 0 else 0.0


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0
