"""The event rule both sides share (envad/event_rule.py)."""

from __future__ import annotations

import numpy as np
import pytest
from event_times import same_groups, times

from envad.errors import InvalidInput
from envad.event_rule import event_codes


def test_events_chain_frames_of_one_camera_within_the_gap():
    envs = ["a", "a", "a", "a", "b", "a", "a"]
    # a: 0, 30, 80 (30 -> 80 is 50 s: chained), 200 (a new event), None (alone), 230
    codes = event_codes(envs, times(0, 30, 80, 200, 10, None, 230), gap_s=60)
    assert same_groups(codes) == [{0, 1, 2}, {3, 6}, {4}, {5}]
    assert codes.min() == 0 and np.all(codes >= 0)


def test_no_gap_makes_every_row_its_own_event():
    codes = event_codes(["a"] * 4, times(0, 1, 2, 3), gap_s=0)
    assert sorted(codes.tolist()) == [0, 1, 2, 3]


def test_events_refuse_bad_input():
    with pytest.raises(InvalidInput, match="timestamps for"):
        event_codes(["a", "a"], times(0), gap_s=60)
    with pytest.raises(InvalidInput, match="finite"):
        event_codes(["a"], times(0), gap_s=float("nan"))


def test_a_gap_exactly_at_the_limit_chains_and_one_microsecond_more_splits():
    codes = event_codes(["a"] * 3, times(0, 60, 120.000001), gap_s=60)
    assert same_groups(codes) == [{0, 1}, {2}]


def test_cameras_interleaved_in_time_keep_their_own_events():
    codes = event_codes(["a", "b", "a", "b"], times(0, 1, 2, 3), gap_s=60)
    assert same_groups(codes) == [{0, 2}, {1, 3}]
