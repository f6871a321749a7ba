"""The review memory: a reviewed row and its group score near 0, images of the same
content at that camera come down, other content and other cameras keep their score; a
row labelled new content and its group are never fit on and score near 1, its content
at that camera rises; the memory survives the arrays persistence writes."""

from __future__ import annotations

import numpy as np

from envad.records import ANOMALY_LABEL, NORMAL_LABEL
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.detectors.leave_out import FitGroups
from envad.server.detectors.reviewed import ReviewMemory, known_anomalies


def archive(seed: int = 0):
    rng = np.random.default_rng(seed)
    common = rng.normal(0, 1, (200, 8))
    rare = rng.normal(0, 1, (10, 8)) * 0.3 + 6.0           # a rarer normal content
    data = np.vstack([common, rare])
    envs = np.array(["cam-a", "cam-b"] * 105)
    codes = np.arange(len(data))
    codes[201] = codes[200]                                 # rows 200 and 201: one event
    return data, envs, codes


def labelled(n: int, rows, label: str) -> np.ndarray:
    out = np.full(n, "", dtype=object)
    out[rows] = label
    return out


def test_the_reviewed_row_its_event_and_its_content_come_down() -> None:
    data, envs, codes = archive()
    memory = ReviewMemory.of(data, labelled(len(data), [200], NORMAL_LABEL), envs, codes)
    assert memory is not None and len(memory.normal_vectors) == 2  # the row and its event
    scores = memory.normal_scores(data, envs)
    assert scores[200] < 0.02 and scores[201] < 0.02
    same_content_same_camera = [r for r in range(202, 210) if envs[r] == envs[200]]
    assert np.all(scores[same_content_same_camera] < 0.9)
    far = data[:1] + 50.0                                   # other content: untouched
    assert memory.normal_scores(far, envs[:1])[0] > 0.99
    other_camera = memory.normal_scores(data[200:201], np.array(["cam-c"]))
    assert other_camera[0] == 1.0                           # no reviewed row of its own
    ensemble = np.full(len(data), 0.95)
    adjusted = memory.adjust(ensemble, data, envs)
    assert adjusted[200] < 0.02 and np.all(adjusted <= ensemble)


def test_new_content_its_event_and_its_content_go_up() -> None:
    data, envs, codes = archive()
    labels = labelled(len(data), [200], ANOMALY_LABEL)
    assert set(np.flatnonzero(known_anomalies(labels, codes))) == {200, 201}
    memory = ReviewMemory.of(data, labels, envs, codes)
    assert memory is not None and len(memory.anomaly_vectors) == 2
    assert len(memory.normal_vectors) == 0
    ensemble = np.full(len(data), 0.3)
    adjusted = memory.adjust(ensemble, data, envs)
    assert adjusted[200] > 0.98 and adjusted[201] > 0.98
    same_content_same_camera = [r for r in range(202, 210) if envs[r] == envs[200]]
    assert np.all(adjusted[same_content_same_camera] > 0.3)
    assert np.all(adjusted[:200] >= ensemble[:200])
    assert memory.adjust(ensemble[:1], data[200:201], np.array(["cam-c"]))[0] == 0.3
    # labelled both ways (an event with a normal and a new-content frame): new content wins
    labels[201] = NORMAL_LABEL
    both = ReviewMemory.of(data, labels, envs, codes)
    assert both is not None and len(both.normal_vectors) == 0
    assert both.adjust(np.full(1, 0.95), data[201:202], envs[201:202])[0] > 0.98


def test_a_bundle_never_fits_on_new_content_and_keeps_its_other_rows_split() -> None:
    data, envs, _ = archive(2)
    ids = np.array([f"row{i:03d}" for i in range(len(data))])
    groups = FitGroups.of_members(ids, np.r_[np.arange(200), 200, 200, np.arange(201, 209)],
                                  60.0)
    spec = FitSpec(detectors=("KNN",), seed=0)
    none = labelled(len(data), [], "")
    plain = fit_bundle(data, spec, envs=envs, labels=none, ids=ids, groups=groups)
    labels = labelled(len(data), [200], ANOMALY_LABEL)
    marked = fit_bundle(data, spec, envs=envs, labels=labels, ids=ids, groups=groups)
    assert marked.n_samples == plain.n_samples - 2          # the row and its event
    assert marked.fit_groups is not None and plain.fit_groups is not None
    left = np.isin(plain.fit_groups.fit_codes, groups.codes_of(ids[200:202]), invert=True)
    np.testing.assert_array_equal(marked.fit_groups.fit_codes, plain.fit_groups.fit_codes[left])
    before = plain.score(data[200:202], envs=envs[200:202], ids=ids[200:202]).ensemble
    after = marked.score(data[200:202], envs=envs[200:202], ids=ids[200:202]).ensemble
    assert np.all(after > before) and np.all(after > marked.threshold)


def test_no_review_no_memory_and_arrays_round_trip() -> None:
    data, envs, codes = archive(1)
    assert ReviewMemory.of(data, labelled(len(data), [], ""), envs, codes) is None
    labels = labelled(len(data), [3, 205], NORMAL_LABEL)
    labels[100] = ANOMALY_LABEL
    memory = ReviewMemory.of(data, labels, envs, codes)
    assert memory is not None
    again = ReviewMemory.from_arrays(memory.arrays())
    np.testing.assert_array_equal(again.adjust(np.full(len(data), 0.5), data, envs),
                                  memory.adjust(np.full(len(data), 0.5), data, envs))
    written_before = {k: v for k, v in memory.arrays().items() if not k.startswith("anomaly")}
    assert len(ReviewMemory.from_arrays(written_before).anomaly_vectors) == 0
    without_cameras = ReviewMemory.of(data, labels)
    assert without_cameras is not None
    assert without_cameras.normal_scores(data[3:4])[0] < 0.02
