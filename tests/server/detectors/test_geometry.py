"""Space steps: L2, style-subspace removal, per-camera centring with adaptation, whitening."""

from __future__ import annotations

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.server.detectors.geometry import (
    ADAPTED_CAMERA,
    ADAPTED_FIT,
    ADAPTED_GLOBAL,
    SPACES,
    CameraStats,
    EmbeddingSpace,
    effective_shrinkage,
    parse_space,
    project_out,
    style_directions,
    unit_length,
    whitening,
)


def cameras(seed=0, per=50, dim=6, offsets=None):
    """Rows from three cameras whose means differ along known directions."""
    rng = np.random.default_rng(seed)
    offsets = offsets if offsets is not None else np.array(
        [[0, 0, 0, 0, 0, 0], [8, 0, 0, 0, 0, 0], [0, 8, 0, 0, 0, 0]], dtype=float)
    X = np.concatenate([rng.normal(size=(per, dim)) + o for o in offsets])
    envs = np.repeat([f"cam-{k}" for k in range(len(offsets))], per)
    return X, envs


def test_unit_length_keeps_direction_and_zero_rows():
    X = np.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(unit_length(X), [[0.6, 0.8], [0.0, 0.0]])


def test_style_directions_span_exactly_the_between_camera_offsets():
    X, envs = cameras()
    basis = style_directions(X, envs, 5)
    assert basis.shape == (2, 6)          # 3 cameras: at most 2 directions
    np.testing.assert_allclose(basis @ basis.T, np.eye(2), atol=1e-10)
    # the camera means' differences lie in the span: projecting them out leaves ~0
    means = np.stack([X[envs == e].mean(0) for e in np.unique(envs)])
    residual = project_out(means - means.mean(0), basis)
    np.testing.assert_allclose(residual, 0, atol=1e-9)
    # a direction orthogonal to the offsets survives untouched
    probe = np.zeros((1, 6))
    probe[0, 4] = 1.0
    direction = project_out(probe, basis)
    assert abs(np.linalg.norm(direction) - 1.0) < 0.05


def test_style_l2_removes_n_directions_then_normalises():
    X, envs = cameras()
    space = EmbeddingSpace("style_l2", n_style=1).fit(X, envs)
    assert space.basis_.shape == (1, 6)
    out, adaptation = space.transform(X)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0)
    np.testing.assert_allclose(out @ space.basis_.T, 0, atol=1e-9)
    assert adaptation == [""] * len(X)


def test_pca_l2_centres_then_rotates_onto_the_principal_axes_keeping_distances():
    """Rows on a cone around a shared direction, spread most along axis 2 and least along
    axis 5: pca_l2 takes the shared offset away (the rows' mean is ~0), its first output
    coordinate is the axis of largest spread, and every distance between rows is the
    one centring alone gives (a rotation), each row unit length."""
    rng = np.random.default_rng(3)
    shared = np.zeros(6)
    shared[0] = 10.0
    X = shared + rng.normal(size=(400, 6)) * np.array([1.0, 1.0, 3.0, 1.0, 1.0, 0.2])
    space = parse_space("pca_l2").fit(X)
    np.testing.assert_allclose(space.global_mean_, unit_length(X).mean(0))
    np.testing.assert_allclose(space.basis_ @ space.basis_.T, np.eye(6), atol=1e-10)
    assert abs(space.basis_[0, 2]) > 0.99 and abs(space.basis_[-1, 5]) > 0.99
    out, adaptation = space.transform(X)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0)
    assert np.linalg.norm(out.mean(0)) < 0.1 < np.linalg.norm(unit_length(X).mean(0))
    assert out[:, 0].var() > 5 * out[:, 4].var()
    centred = unit_length(unit_length(X) - space.global_mean_)
    np.testing.assert_allclose(out @ out.T, centred @ centred.T, atol=1e-10)
    assert adaptation == [""] * len(X)
    # the same rows at another scale land on the same points (unit length first)
    np.testing.assert_allclose(space.transform(3.0 * X)[0], out)


def test_l2_and_raw():
    X, envs = cameras()
    np.testing.assert_allclose(EmbeddingSpace("raw").fit(X).transform(X)[0], X)
    np.testing.assert_allclose(EmbeddingSpace("l2").fit(X).transform(X)[0], unit_length(X))


def test_center_l2_uses_fit_means_running_means_from_n_and_global_below():
    X, envs = cameras()
    space = EmbeddingSpace("center_l2", min_camera_rows=10).fit(X, envs)
    query = np.ones((3, 6)) * 5.0
    own_mean = np.full(6, 2.0)
    running = {"new-cam": CameraStats(10, own_mean), "young-cam": CameraStats(9, own_mean)}
    out, adaptation = space.transform(query, ["cam-1", "new-cam", "young-cam"], running.get)
    assert adaptation == [ADAPTED_FIT, ADAPTED_CAMERA, ADAPTED_GLOBAL]
    np.testing.assert_allclose(out[0], unit_length((query[0] - X[envs == "cam-1"].mean(0))
                                                   [None])[0])
    np.testing.assert_allclose(out[1], unit_length((query[1] - own_mean)[None])[0])
    np.testing.assert_allclose(out[2], unit_length((query[2] - X.mean(0))[None])[0])
    # no camera at all: the global mean
    assert space.transform(query[:1])[1] == [ADAPTED_GLOBAL]


def test_centring_removes_a_camera_offset_that_l2_alone_keeps():
    X, envs = cameras()
    shifted = X[envs == "cam-0"] + np.array([0, 0, 0, 30.0, 0, 0])   # unseen camera
    stats = CameraStats(len(shifted), shifted.mean(0))
    space = EmbeddingSpace("center_l2").fit(X, envs)
    centred, adaptation = space.transform(shifted, ["cam-new"] * len(shifted),
                                          lambda env: stats)
    assert set(adaptation) == {ADAPTED_CAMERA}
    reference, _ = space.transform(X[envs == "cam-0"], envs[envs == "cam-0"])
    gap = abs(centred.mean(0) - reference.mean(0)).max()
    assert gap < 0.2
    l2 = EmbeddingSpace("l2").fit(X)
    assert abs(l2.transform(shifted)[0].mean(0) - l2.transform(X[:50])[0].mean(0)).max() > 0.5


def test_whitening_gives_identity_covariance_and_bounds_empty_directions():
    rng = np.random.default_rng(3)
    C = rng.normal(size=(400, 4)) * np.array([10.0, 3.0, 1.0, 0.1])
    C -= C.mean(0)
    W = whitening(C, 1e-12)
    np.testing.assert_allclose(W, W.T)
    np.testing.assert_allclose(np.cov((C @ W).T, bias=True), np.eye(4), atol=1e-6)
    # a direction the rows never span is scaled by 1/sqrt(shrinkage x largest), not 1/0
    flat = np.concatenate([C, np.zeros((400, 1))], axis=1)
    W = whitening(flat, 0.01)
    largest = np.linalg.eigvalsh(np.cov(flat.T, bias=True)).max()
    np.testing.assert_allclose(W[4, 4], 1 / np.sqrt(0.01 * largest))
    assert np.isfinite(W).all()


def kth_neighbour_distance(reference: np.ndarray, queries: np.ndarray, k: int = 5):
    d = np.linalg.norm(queries[:, None, :] - reference[None, :, :], axis=2)
    return np.sort(d, axis=1)[:, k - 1]


def test_few_fitting_rows_get_more_ridge():
    assert effective_shrinkage(0.003, 10**9, 512) == pytest.approx(0.003)
    ridges = [effective_shrinkage(0.003, n, 512) for n in (100, 300, 1000, 3000, 30000)]
    assert ridges == sorted(ridges, reverse=True)
    assert ridges[0] > 30 * ridges[-1]
    assert effective_shrinkage(0.5, 10, 512) == 1.0                 # capped
    # the fitted space uses it: few rows, a flatter whitener
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 8)) * np.geomspace(1, 0.01, 8)
    plenty = parse_space("white_l2").fit(X).whitener_
    few = parse_space("white_l2").fit(X[:20]).whitener_
    assert np.linalg.cond(few) < np.linalg.cond(plenty)


def test_white_l2_weighs_a_rare_direction_like_a_dominant_one():
    """Fit rows spread 100x less along axis 4 than along axes 1-3: in l2 a query 4 spreads
    off along axis 4 sits among the rows, in white_l2 it is as far out as one 4 spreads
    off along axis 1."""
    rng = np.random.default_rng(0)
    spread = np.array([0.0, 1.0, 1.0, 1.0, 0.01])
    X = np.array([10.0, 0, 0, 0, 0]) + rng.normal(size=(2000, 5)) * spread
    queries = np.array([[10.0, 4.0, 0, 0, 0], [10.0, 0, 0, 0, 0.04]])
    space = parse_space("white_l2:0.000001").fit(X)
    fit_rows, adaptation = space.transform(X)
    np.testing.assert_allclose(np.linalg.norm(fit_rows, axis=1), 1.0)
    assert adaptation == [""] * len(X)
    white = kth_neighbour_distance(fit_rows, space.transform(queries)[0])
    assert white[1] > 0.5 * white[0]
    plain = kth_neighbour_distance(unit_length(X), unit_length(queries))
    assert plain[1] < 0.25 * plain[0]
    # the transform is: unit length, centre on the fit rows' mean, whiten, unit length
    expected = unit_length((unit_length(queries) - unit_length(X).mean(0)) @ space.whitener_)
    np.testing.assert_allclose(space.transform(queries)[0], expected)


def test_center_white_l2_whitens_the_within_camera_spread_and_adapts_like_center_l2():
    X, envs = cameras()
    X = X * np.array([5.0, 1, 1, 1, 1, 0.2])        # unequal within-camera spread
    space = parse_space("center_white_l2:0.0000001", min_camera_rows=10).fit(X, envs)
    assert space.camera_aware
    residuals = X - np.stack([X[envs == e].mean(0) for e in envs])
    np.testing.assert_allclose(np.cov((residuals @ space.whitener_).T, bias=True), np.eye(6),
                               atol=1e-4)
    own_mean = np.full(6, 2.0)
    running = {"new-cam": CameraStats(10, own_mean), "young-cam": CameraStats(9, own_mean)}
    query = np.ones((3, 6)) * 5.0
    out, adaptation = space.transform(query, ["cam-1", "new-cam", "young-cam"], running.get)
    assert adaptation == [ADAPTED_FIT, ADAPTED_CAMERA, ADAPTED_GLOBAL]
    centres = [X[envs == "cam-1"].mean(0), own_mean, X.mean(0)]
    for row, centre in zip(out, centres, strict=True):
        np.testing.assert_allclose(row, unit_length(((query[0] - centre) @ space.whitener_)
                                                    [None])[0])


def test_round_trip_through_arrays():
    X, envs = cameras()
    for spec in ("raw", "l2", "pca_l2", "style_l2:2", "center_l2", "white_l2",
                 "center_white_l2:0.01"):
        space = parse_space(spec).fit(X, envs)
        again = EmbeddingSpace.from_arrays(space.params(), space.arrays())
        np.testing.assert_allclose(again.transform(X, envs)[0], space.transform(X, envs)[0])
        assert again.describe() == space.describe()


@pytest.mark.parametrize("spec, message", [
    ("nope", "unknown space"), ("style_l2:x", "integer"), ("l2:3", "no parameter"),
    ("style_l2:0", "n_style"), ("white_l2:x", "number"), ("white_l2:0", "shrinkage"),
    ("center_white_l2:2", "shrinkage"), ("white_l2:nan", "shrinkage"),
])
def test_bad_specs(spec, message):
    with pytest.raises(InvalidInput, match=message):
        parse_space(spec)


def test_style_removal_needs_two_cameras_and_centring_needs_cameras():
    X, _ = cameras()
    with pytest.raises(InvalidInput, match="2 cameras"):
        parse_space("style_l2:1").fit(X, np.array(["one"] * len(X)))
    with pytest.raises(InvalidInput, match="camera"):
        parse_space("center_l2").fit(X)
    with pytest.raises(InvalidInput, match="camera"):
        parse_space("center_white_l2").fit(X)
    one = parse_space("center_l2").fit(X, np.array(["one"] * len(X)))
    np.testing.assert_allclose(one.camera_means_["one"], X.mean(0))


def test_registry_lists_every_space():
    assert SPACES == ("raw", "l2", "pca_l2", "style_l2", "center_l2", "white_l2",
                      "center_white_l2")
    for name in SPACES:
        assert parse_space(name).name == name
