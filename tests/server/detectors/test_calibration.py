"""Calibration: interpolated (strictly increasing, never ties) and steps (older bundles)."""

from __future__ import annotations

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.server.detectors.calibration import Calibration


def test_steps_is_the_fraction_of_reference_at_or_below():
    steps = Calibration.of(np.array([1.0, 2.0, 3.0, 4.0]), "steps")
    np.testing.assert_allclose(steps(np.array([0.5, 2.0, 3.5, 9.0])), [0.0, 0.5, 0.75, 1.0])


def test_interpolated_passes_through_each_reference_value_and_is_linear_between():
    calibration = Calibration.of(np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(calibration(np.array([1.0, 2.0, 2.5, 4.0])),
                               [0.2, 0.4, 0.5, 0.8])


def test_interpolated_tails_rise_to_one_and_fall_to_zero_by_the_interquartile_range():
    reference = np.array([1.0, 2.0, 3.0, 4.0])      # n = 4; IQR = 3.25 - 1.75 = 1.5
    calibration = Calibration.of(reference)
    # one IQR above the largest value: halfway between 4/5 and 1
    np.testing.assert_allclose(calibration(np.array([5.5, 1.0 - 1.5])), [0.9, 0.1])
    far = calibration(np.array([1e6, 1e9, -1e6, -1e9]))
    assert 0.8 < far[0] < far[1] < 1.0 and 0.2 > far[2] > far[3] > 0.0


def test_interpolated_never_ties_scores_that_differ_where_steps_does():
    rng = np.random.default_rng(0)
    reference = np.sort(rng.normal(size=25))
    raw = np.sort(np.concatenate([rng.normal(size=500), reference.max() + rng.random(20),
                                  reference.min() - rng.random(20)]))
    raw = np.unique(raw)
    interpolated = Calibration.of(reference)(raw)
    assert (np.diff(interpolated) > 0).all()                     # strictly increasing
    assert ((interpolated > 0) & (interpolated < 1)).all()
    steps = Calibration.of(reference, "steps")(raw)
    assert len(np.unique(steps)) <= len(reference) + 1 < len(raw)   # steps ties most rows


def test_repeated_and_constant_references():
    repeated = Calibration.of(np.array([1.0, 2.0, 2.0, 2.0, 3.0]))
    np.testing.assert_allclose(repeated(np.array([2.0, 2.5])), [4 / 6, 4.5 / 6])
    constant = Calibration.of(np.full(9, 0.7))     # no spread: the tails' scale is 1
    np.testing.assert_allclose(constant(np.array([0.7, 1.7, -0.3])), [0.9, 0.95, 0.45])


@pytest.mark.parametrize("reference, kind, message", [
    (np.array([]), "interpolated", "non-empty"),
    (np.array([1.0]), "quantile", "unknown calibration"),
])
def test_bad_calibrations_are_refused(reference, kind, message):
    with pytest.raises(InvalidInput, match=message):
        Calibration.of(reference, kind)
