"""The reviewed-normal memory: a reviewed row and its group score near 0, images of the
same content at that camera come down, other content and other cameras keep their
score, and the memory survives the arrays persistence writes."""

from __future__ import annotations

import numpy as np

from envad.server.detectors.reviewed import ReviewedNormals


def archive(seed: int = 0):
    rng = np.random.default_rng(seed)
    common = rng.normal(0, 1, (200, 8))
    rare = rng.normal(0, 1, (10, 8)) * 0.3 + 6.0           # a rarer normal content
    data = np.vstack([common, rare])
    envs = np.array(["cam-a", "cam-b"] * 105)
    codes = np.arange(len(data))
    codes[201] = codes[200]                                 # rows 200 and 201: one event
    return data, envs, codes


def test_the_reviewed_row_its_event_and_its_content_come_down() -> None:
    data, envs, codes = archive()
    reviewed = np.zeros(len(data), bool)
    reviewed[200] = True                                    # a rare row of cam-a
    memory = ReviewedNormals.of(data, reviewed, envs, codes)
    assert memory is not None and len(memory.vectors) == 2  # the row and its event
    scores = memory.scores(data, envs)
    assert scores[200] < 0.02 and scores[201] < 0.02
    same_content_same_camera = [r for r in range(202, 210) if envs[r] == envs[200]]
    assert np.all(scores[same_content_same_camera] < 0.9)
    far = data[:1] + 50.0                                   # other content: untouched
    assert memory.scores(far, envs[:1])[0] > 0.99
    other_camera = memory.scores(data[200:201], np.array(["cam-c"]))
    assert other_camera[0] == 1.0                           # no reviewed row of its own
    ensemble = np.full(len(data), 0.95)
    capped = memory.cap(ensemble, data, envs)
    assert capped[200] < 0.02 and np.all(capped <= ensemble)


def test_no_review_no_memory_and_arrays_round_trip() -> None:
    data, envs, codes = archive(1)
    assert ReviewedNormals.of(data, np.zeros(len(data), bool), envs, codes) is None
    reviewed = np.zeros(len(data), bool)
    reviewed[[3, 205]] = True
    memory = ReviewedNormals.of(data, reviewed, envs, codes)
    assert memory is not None
    again = ReviewedNormals.from_arrays(memory.arrays())
    np.testing.assert_array_equal(again.scores(data, envs), memory.scores(data, envs))
    without_cameras = ReviewedNormals.of(data, reviewed)
    assert without_cameras is not None and without_cameras.scores(data[3:4])[0] < 0.02
