"""Calibration: a detector's raw score as a value in (0, 1) against held-out normal scores.

A bundle keeps, per detector, the sorted raw scores of its held-out calibration rows
(the reference, n values). Two ways to read a raw score against it:

- `interpolated` (bundles fitted now): strictly increasing in the raw score, so a
  calibrated score never ties two images the raw score tells apart. At a reference value
  v it is (#reference <= v) / (n + 1); between consecutive distinct reference values it
  is linear; beyond the largest it rises towards 1 as 1 - (1/(n+1)) / (1 + d / s), and
  below the smallest it falls towards 0 as F(min) / (1 + d / s), d the distance past the
  end and s the reference's interquartile range (its range, else 1, when that is 0). So
  an image one s above every calibration row sits halfway between F(max) and 1, and the
  ranking among the images above every calibration row — the ones a reviewer sees first —
  is the raw score's.
- `steps` (what bundles saved before interpolation use): the fraction of reference
  values <= the raw score, in [0, 1]; every image above the largest reference value
  gets 1.0, so a one-detector bundle ties them all.

A saved bundle records its kind; its threshold was computed with that kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envad.errors import InvalidInput

INTERPOLATED = "interpolated"
STEPS = "steps"
#: the kind a bundle fitted now uses
DEFAULT_CALIBRATION = INTERPOLATED


@dataclass(frozen=True)
class Calibration:
    """One detector's calibration: a non-decreasing map from raw scores to [0, 1]
    (`interpolated`: strictly increasing, into (0, 1))."""

    kind: str
    reference: np.ndarray      # sorted held-out raw scores
    knots: np.ndarray          # distinct reference values, ascending
    levels: np.ndarray         # (#reference <= knot) / (n + 1)
    slopes: np.ndarray         # of the levels between consecutive knots
    scale: float               # s of the tails

    @classmethod
    def of(cls, reference_sorted: np.ndarray, kind: str = DEFAULT_CALIBRATION) -> Calibration:
        """The calibration of `kind` against the sorted reference scores."""
        if kind not in KINDS:
            raise InvalidInput(f"unknown calibration {kind!r}; known: {sorted(KINDS)}")
        reference = np.asarray(reference_sorted, dtype=np.float64)
        if reference.ndim != 1 or len(reference) == 0:
            raise InvalidInput("a calibration needs a non-empty 1-D reference")
        knots, counts = np.unique(reference, return_counts=True)
        levels = np.cumsum(counts) / (len(reference) + 1.0)
        slopes = np.diff(levels) / np.diff(knots)
        return cls(kind, reference, knots, levels, slopes, _tail_scale(reference))

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        return KINDS[self.kind](self, np.asarray(raw, dtype=np.float64))


def _tail_scale(reference: np.ndarray) -> float:
    q1, q3 = np.quantile(reference, [0.25, 0.75])
    for spread in (q3 - q1, reference[-1] - reference[0]):
        if spread > 0 and np.isfinite(spread):
            return float(spread)
    return 1.0


def _steps(calibration: Calibration, raw: np.ndarray) -> np.ndarray:
    ranks = np.searchsorted(calibration.reference, raw, side="right")
    return ranks.astype(np.float64) / len(calibration.reference)


def _interpolated(calibration: Calibration, raw: np.ndarray) -> np.ndarray:
    knots, levels, scale = calibration.knots, calibration.levels, calibration.scale
    # element by element (np.interp's arithmetic depends on how many values it is given,
    # and a row's score must not depend on the rows scored with it)
    if len(knots) > 1:
        segment = np.clip(np.searchsorted(knots, raw, side="right") - 1, 0, len(knots) - 2)
        out = levels[segment] + (raw - knots[segment]) * calibration.slopes[segment]
    else:
        out = np.full_like(raw, levels[0])
    above, below = raw > knots[-1], raw < knots[0]
    if above.any():
        top_gap = 1.0 - levels[-1]
        out[above] = 1.0 - top_gap / (1.0 + (raw[above] - knots[-1]) / scale)
    if below.any():
        out[below] = levels[0] / (1.0 + (knots[0] - raw[below]) / scale)
    return out


KINDS = {INTERPOLATED: _interpolated, STEPS: _steps}
