"""Arrival orders: each a seeded arrangement of a camera's images, cameras kept apart."""

from __future__ import annotations

import numpy as np
import pytest

from envad.arrival_orders import DEFAULT_ORDERS, ORDERS, arrange, parse_orders
from envad.errors import InvalidInput


def _camera(n_normal=200, n_new=100):
    return np.array([False] * n_normal + [True] * n_new)


def _runs(flags: np.ndarray) -> list[int]:
    """Lengths of the runs of True in arrival order."""
    runs, length = [], 0
    for flag in flags:
        if flag:
            length += 1
        elif length:
            runs.append(length)
            length = 0
    return runs + ([length] if length else [])


@pytest.mark.parametrize("name", list(ORDERS))
def test_each_order_is_seeded_and_lists_each_image_at_most_once(name):
    positive = _camera()
    first = ORDERS[name](positive, np.random.default_rng(0))
    again = ORDERS[name](positive, np.random.default_rng(0))
    other = ORDERS[name](positive, np.random.default_rng(1))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert len(set(first.tolist())) == len(first)
    assert set(np.flatnonzero(~positive)) <= set(first.tolist())   # every normal image


def test_the_orders_arrange_new_content_as_named():
    positive = _camera()
    rng = np.random.default_rng(0)
    assert len(ORDERS["shuffled"](positive, rng)) == 300
    first = positive[ORDERS["normal-first"](positive, rng)]
    assert not first[:200].any() and first[200:].all()
    for run in (8, 50):
        flags = positive[ORDERS[f"bursts-{run}"](positive, rng)]
        lengths = _runs(flags)
        assert sum(lengths) == 100
        # runs that land in the same gap join; none is shorter than a run unless it is
        # the last, shorter one
        assert all(length % run == 0 or length % run == 100 % run for length in lengths)
        assert max(lengths) >= run
    for name, share in (("spread-5%", 0.05), ("spread-20%", 0.2)):
        flags = positive[ORDERS[name](positive, rng)]
        assert flags.mean() == pytest.approx(share, abs=0.01)
        gaps = np.diff(np.flatnonzero(flags))
        assert gaps.max() - gaps.min() <= 1            # evenly spread


def test_arrange_orders_each_camera_on_its_own_and_lists_cameras_in_turn():
    envs = np.array(["b"] * 30 + ["a"] * 30)
    positive = np.tile(np.array([False] * 20 + [True] * 10), 2)
    rows = arrange(envs, positive, "normal-first", seed=3)
    assert sorted(rows.tolist()) == list(range(60))
    assert envs[rows].tolist() == ["a"] * 30 + ["b"] * 30
    for half in (rows[:30], rows[30:]):
        assert positive[half].tolist() == [False] * 20 + [True] * 10


def test_orders_parse_by_name_and_all():
    assert parse_orders("all") == DEFAULT_ORDERS == parse_orders("")
    assert parse_orders("shuffled, bursts-8") == ("shuffled", "bursts-8")
    with pytest.raises(InvalidInput, match="unknown arrival order"):
        parse_orders("shuffled,backwards")
