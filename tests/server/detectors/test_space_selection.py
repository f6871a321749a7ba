"""The leave-one-camera-out novelty proxy and the choice of a space step."""

from __future__ import annotations

import numpy as np
import pytest

from envad.server.detectors.geometry import parse_space
from envad.server.detectors.space_selection import candidate_spaces, choose_space, proxy_auc


def styled_content(seed=0, per=40):
    """4 cameras x 3 content labels in 8-d: content lives in dims 0-1, and each camera
    adds its own large offset in dims 2-7 plus a tilt of its whole cloud."""
    rng = np.random.default_rng(seed)
    centres = {"a": [4, 0], "b": [0, 4], "c": [-4, -4]}
    X, envs, labels = [], [], []
    for k in range(4):
        offset = rng.normal(scale=12.0, size=6)
        for label, centre in centres.items():
            rows = np.zeros((per, 8))
            rows[:, :2] = rng.normal(size=(per, 2)) * 0.7 + centre
            rows[:, 2:] = offset + rng.normal(size=(per, 6)) * 0.7
            X.append(rows)
            envs += [f"cam-{k}"] * per
            labels += [label] * per
    return np.concatenate(X), np.array(envs), np.array(labels)


def test_centring_beats_raw_when_each_camera_is_offset():
    X, envs, labels = styled_content()
    raw = proxy_auc("raw", X, envs, labels)
    centred = proxy_auc("center_l2", X, envs, labels)
    assert centred > raw + 0.1
    choice = choose_space(X, envs, labels)
    best = max(choice.scores, key=choice.scores.get)
    assert choice.space.describe() == parse_space(best).describe()
    assert choice.space.name in ("center_l2", "style_l2")


def test_candidates_follow_the_camera_count():
    always = ["raw", "l2", "pca_l2", "center_l2", "white_l2", "center_white_l2"]
    assert candidate_spaces(2) == always
    assert candidate_spaces(6) == always + ["style_l2:1", "style_l2:2", "style_l2:3"]


def test_selection_needs_cameras_and_labels():
    X, envs, labels = styled_content()
    with pytest.raises(ValueError, match="2 cameras"):
        choose_space(X, envs, np.array(["a"] * len(X)))


def test_sample_cap_is_seeded():
    X, envs, labels = styled_content()
    one = choose_space(X, envs, labels, max_rows=200, seed=3)
    two = choose_space(X, envs, labels, max_rows=200, seed=3)
    assert one.scores == two.scores and one.n_rows == 200
