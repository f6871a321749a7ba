"""How a camera the detectors never saw scores, measured on the fit set's own cameras.

The score adaptation (score_adaptation.py) maps a camera's scores onto the fit set's
scale with that camera's statistics, shrunk toward a prior while it has few stored
rows. The fit set's own statistics make a poor prior for a new camera: its style moves
every image away from the fit rows, so its first (normal) images score like new content
until enough of them are stored. In a stream that delivers a camera's normal images
first that warm-up is where the adaptation loses most.

A better prior is what an unseen camera looks like to the detectors, which the fit set
can measure by leaving each of its cameras out: per camera c (at most MAX_CAMERAS,
seeded), each detector is fitted on the fit part's rows of the other cameras and
scores c's rows and the other cameras' calibration rows; c's shift is the mean of its
scores less the calibration rows' mean, in their standard deviations, and its spread
the ratio of the standard deviations. The prior is the mean shift and spread over the
cameras left out: `UnseenCameraPrior`, kept with the bundle. A camera of the fit set
keeps the fit set's own prior.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: cameras left out, at most (seeded choice): each costs one fit of every detector
MAX_CAMERAS = 8
#: rows a camera needs to be left out (and its shift to be measured)
MIN_CAMERA_ROWS = 16


@dataclass(frozen=True)
class UnseenCameraPrior:
    """The fit set's cameras, and per detector (in the bundle's order) the mean shift,
    in standard deviations of held-out scores, and the spread ratio of a camera that
    the detectors did not see."""

    cameras: tuple[str, ...]
    shift: np.ndarray
    spread: np.ndarray

    def to_json(self) -> dict:
        return {"cameras": list(self.cameras), "shift": self.shift.tolist(),
                "spread": self.spread.tolist()}

    @classmethod
    def from_json(cls, data: dict | None) -> UnseenCameraPrior | None:
        if not data:
            return None
        return cls(tuple(data["cameras"]), np.asarray(data["shift"], np.float64),
                   np.asarray(data["spread"], np.float64))


#: fit(rows) -> a scorer of rows: one detector, fitted on the rows it is given
FitDetector = Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]


def measure(fitters: list[FitDetector], inputs: list[tuple[np.ndarray, np.ndarray]],
            envs_fit: np.ndarray, envs_cal: np.ndarray, seed: int
            ) -> UnseenCameraPrior | None:
    """The prior of detectors `fitters` (each with its (fit part, calibration part)
    rows in `inputs`), from the fit part's cameras `envs_fit` and the calibration
    part's `envs_cal`; None with fewer than two cameras of MIN_CAMERA_ROWS rows."""
    cameras = sorted(set(envs_fit.tolist()) | set(envs_cal.tolist()))
    usable = [c for c in cameras
              if (envs_fit == c).sum() + (envs_cal == c).sum() >= MIN_CAMERA_ROWS
              and (envs_cal != c).sum() >= MIN_CAMERA_ROWS]
    if len(usable) < 2:
        return None
    rng = np.random.default_rng([seed, 41])
    left_out = sorted(rng.choice(usable, size=min(MAX_CAMERAS, len(usable)), replace=False))
    shift, spread = np.zeros(len(fitters)), np.zeros(len(fitters))
    for j, (fit_detector, (fit_part, cal_part)) in enumerate(zip(fitters, inputs, strict=True)):
        shifts, spreads = [], []
        for camera in left_out:
            score = fit_detector(fit_part[envs_fit != camera])
            own = score(np.concatenate([fit_part[envs_fit == camera],
                                        cal_part[envs_cal == camera]]))
            others = score(cal_part[envs_cal != camera])
            sd = float(np.std(others)) or 1.0
            shifts.append((float(np.mean(own)) - float(np.mean(others))) / sd)
            spreads.append(float(np.std(own)) / sd)
        shift[j], spread[j] = float(np.mean(shifts)), max(float(np.mean(spreads)), 1e-3)
    return UnseenCameraPrior(tuple(cameras), shift, spread)
