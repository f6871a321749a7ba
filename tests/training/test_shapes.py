"""Procedural shapes: deterministic, varied, distinct classes whose near-neighbour pairs
really are near; written through PhotoDigits' cameras as the `shapes` recipe."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from envad.training import content_families, shapes
from envad.training.data import load_folder
from envad.training.photodigits import RECIPES, SHAPES, STANDARD, generate, load_content


@pytest.fixture(scope="module")
def small_bank():
    return shapes.bank(0, per_class=40)


def test_a_bank_is_deterministic_for_a_seed(small_bank):
    glyphs, labels = small_bank
    again, again_labels = shapes.bank(0, per_class=40)
    assert np.array_equal(glyphs, again) and np.array_equal(labels, again_labels)
    other, _ = shapes.bank(1, per_class=40)
    assert not np.array_equal(glyphs, other)
    assert glyphs.shape == (40 * len(shapes.CLASSES), shapes.SIDE, shapes.SIDE)
    assert glyphs.dtype == np.uint8 and glyphs.max() == 16 and glyphs.min() == 0


def test_instances_vary_and_stay_inside_the_glyph(small_bank):
    glyphs, labels = small_bank
    for label in range(len(shapes.CLASSES)):
        members = glyphs[labels == label].reshape(40, -1)
        assert len({m.tobytes() for m in members}) == 40, shapes.CLASSES[label]
        ink = members.sum(axis=1) / 16
        assert ink.min() > 0.04 * shapes.SIDE ** 2          # every instance drawn
        assert ink.std() / ink.mean() > 0.05                 # sizes and strokes vary
    # the border rows and columns stay nearly empty: nothing is cut off
    border = np.concatenate([glyphs[:, 0], glyphs[:, -1], glyphs[:, :, 0], glyphs[:, :, -1]],
                            axis=1)
    assert border.mean() < 0.5


def _pixel_centroid_confusion(glyphs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Row-normalised confusion of a nearest-class-centroid rule in pixel space (half
    of every class for the centroids, the other half classified)."""
    X = glyphs.reshape(len(glyphs), -1).astype(float)
    n = len(shapes.CLASSES)
    first = np.concatenate([np.flatnonzero(labels == c)[::2] for c in range(n)])
    second = np.setdiff1d(np.arange(len(X)), first)
    centroids = np.stack([X[first][labels[first] == c].mean(axis=0) for c in range(n)])
    predicted = ((X[second][:, None] - centroids[None]) ** 2).sum(-1).argmin(axis=1)
    confusion = np.zeros((n, n))
    np.add.at(confusion, (labels[second], predicted), 1)
    return confusion / confusion.sum(axis=1, keepdims=True)


def test_classes_are_distinct_and_near_pairs_are_confused_more_than_far_ones():
    glyphs, labels = shapes.bank(0, per_class=80)
    confusion = _pixel_centroid_confusion(glyphs, labels)
    assert np.diag(confusion).mean() > 0.7                   # the classes are distinct

    def mixed(a: int, b: int) -> float:
        return float(confusion[a, b] + confusion[b, a]) / 2

    near = set(shapes.NEAR_PAIRS)
    far = [p for p in itertools.combinations(range(len(shapes.CLASSES)), 2) if p not in near]
    near_mean = np.mean([mixed(*p) for p in near])
    far_mean = np.mean([mixed(*p) for p in far])
    assert near_mean > 5 * far_mean
    assert mixed(0, 1) > 0.1 and mixed(2, 3) > 0.1           # square / rounded, disc / hexagon


def test_the_shapes_recipe_writes_the_folder_format(tmp_path):
    root = generate(tmp_path / "shapes", 32, 0, progress=False, train_per_camera=24,
                    test_per_camera=10, recipe="shapes")
    ds = load_folder(root)
    assert ds.envs("train") == sorted(c.env for c in SHAPES.train_cameras)
    assert ds.envs("test") == sorted(c.env for c in SHAPES.test_cameras)
    assert not {c.env for c in SHAPES.cameras} & {c.env for c in STANDARD.cameras}
    assert not {c.photo for c in SHAPES.test_cameras} & {
        c.photo for r in RECIPES.values() if r is not SHAPES for c in r.cameras}
    assert SHAPES.anomalies == (3, 7, 8, 9, 10, 11)
    assert all((int(r.label) in SHAPES.anomalies) == r.is_anomaly for r in ds.records)
    assert not any(r.is_anomaly for r in ds.records if r.split in ("train", "val"))
    assert sum(r.is_anomaly for r in ds.records if r.split == "test") == 3 * 4
    # every anomaly but the triangles is a near neighbour of a normal class
    normals = set(SHAPES.normal_a + SHAPES.normal_b)
    near_normal = {b if a in normals else a for a, b in shapes.NEAR_PAIRS
                   if (a in normals) != (b in normals)}
    assert set(SHAPES.anomalies) - near_normal == {8, 9}
    content = load_content(root)
    assert set(content) == {r.id for r in ds.records}
    assert next(iter(content.values())).shape == (shapes.SIDE, shapes.SIDE)
    meta = json.loads((root / "photodigits.json").read_text())
    assert meta["content"] == "shapes" and meta["name"] == "photodigits-shapes-32"
    assert meta["classes"]["0"] == "square" and meta["classes"]["10"] == "ring"
    assert ds.images([0, len(ds) - 1], 32).shape == (2, 32, 32, 3)
    again = generate(tmp_path / "again", 32, 0, progress=False, train_per_camera=24,
                     test_per_camera=10, recipe="shapes")
    assert (again / "metadata.csv").read_bytes() == (root / "metadata.csv").read_bytes()
    assert (again / "digits.npz").read_bytes() == (root / "digits.npz").read_bytes()


def test_the_content_registry_refuses_duplicates_and_unknown_names():
    assert set(content_families.CONTENT_FAMILIES) >= {"digits", "shapes"}
    with pytest.raises(ValueError, match="registered already"):
        content_families.register(content_families.get("shapes"))
    with pytest.raises(ValueError, match="unknown content family 'letters'; known: digits"):
        content_families.get("letters")
    assert STANDARD.content == "digits" and STANDARD.anomalies == (6, 7, 8, 9)
