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


def test_named_events_group_their_frames_whatever_the_time_between_them():
    envs = ["a", "a", "a", "a", "b", "a"]
    names = ["e1", "e1", "", "", "e1", None]
    # rows 0 and 1 an hour apart share e1; row 4 names e1 on another camera; the unnamed
    # rows follow the time rule (2 and 3 chain, 5 has no timestamp)
    codes = event_codes(envs, times(0, 3600, 10, 40, 0, None), gap_s=60, names=names)
    assert same_groups(codes) == [{0, 1}, {2, 3}, {4}, {5}]
    assert sorted(set(codes.tolist())) == [0, 1, 2, 3]


def test_a_named_frame_does_not_chain_the_unnamed_frames_around_it():
    codes = event_codes(["a"] * 3, times(0, 50, 100), gap_s=60, names=["", "e9", ""])
    assert same_groups(codes) == [{0}, {1}, {2}]


def test_no_gap_makes_named_frames_their_own_events_too():
    codes = event_codes(["a"] * 3, times(0, 1, 2), gap_s=-1, names=["e1", "e1", "e1"])
    assert same_groups(codes) == [{0}, {1}, {2}]


def test_event_names_must_match_the_rows():
    with pytest.raises(InvalidInput, match="event names for"):
        event_codes(["a", "a"], times(0, 1), gap_s=60, names=["e1"])
