"""PCA scored through one product equals pyod's PCA, less the components without variance."""

from __future__ import annotations

import numpy as np
import pytest
from pyod.models.pca import PCA

from envad.server.detectors import distances
from envad.server.detectors.pca import VectorizedPCA, varying_components


@pytest.mark.parametrize("dim, standardization", [(8, False), (64, False), (512, False),
                                                  (64, True)])
def test_scores_equal_pyods(dim, standardization, monkeypatch):
    rng = np.random.default_rng(dim)
    # more rows than dimensions: every component varies, so nothing is left out
    train = rng.standard_normal((max(300, 2 * dim), dim)) * rng.uniform(0.5, 3, dim)
    queries = np.vstack([rng.standard_normal((60, dim)), rng.standard_normal((10, dim)) * 5])
    settings = dict(standardization=standardization, whiten=True, random_state=0)
    ours, reference = VectorizedPCA(**settings).fit(train), PCA(**settings).fit(train)
    expected = reference.decision_function(queries)
    np.testing.assert_allclose(ours.decision_function(queries), expected, rtol=1e-10)
    np.testing.assert_allclose(ours.decision_function(queries[:1]), expected[:1], rtol=1e-10)
    monkeypatch.setattr(distances, "BLOCK_ELEMENTS", 7 * dim)   # several row blocks
    np.testing.assert_allclose(ours.decision_function(queries), expected, rtol=1e-10)
    assert expected[60:].mean() > expected[:60].mean()


@pytest.mark.parametrize("rows, dim, constant", [(2000, 32, True), (300, 512, False)])
def test_components_without_variance_are_left_out(rows, dim, constant):
    """A feature the same on every fit row, or fewer fit rows than dimensions, leaves SVD
    components that span no variance of the rows: pyod scores every row inf (or, where
    the BLAS leaves round-off in that variance, some 1e17; or by one arbitrary
    direction); here they are left out and an odd row ranks above every normal one."""
    rng = np.random.default_rng(rows)
    train = rng.standard_normal((rows, dim))
    queries = np.vstack([rng.standard_normal((40, dim)), rng.standard_normal((10, dim)) * 4])
    if constant:
        train[:, 3] = queries[:, 3] = 1.5
    settings = dict(standardization=False, whiten=True, random_state=0)
    ours = VectorizedPCA(**settings).fit(train)
    scores = ours.decision_function(queries)
    assert np.isfinite(scores).all() and np.isfinite(ours.decision_scores_).all()
    assert scores[40:].min() > scores[:40].max()
    assert len(ours.selected_components_) == (dim - 1 if constant else rows - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        reference = PCA(**settings).fit(train)
        pyods = reference.decision_function(queries)
    if constant:       # pyod's weight of the constant direction is 0 (or round-off)
        assert (np.isinf(pyods) | (pyods > 1e12 * scores.max())).all()
    else:              # one direction of round-off weight decides pyod's scores
        assert reference.selected_w_components_.min() < 1e-20


def test_no_varying_component_scores_every_row_alike():
    train = np.tile(np.arange(8.0), (50, 1))           # every fit row the same
    ours = VectorizedPCA(standardization=False, whiten=True, random_state=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ours.fit(train)
    assert len(ours.selected_components_) == 0
    np.testing.assert_array_equal(ours.decision_function(np.eye(8)), np.zeros(8))


def test_varying_components_keeps_more_than_round_off():
    assert varying_components(np.array([4.0, 1e-6, 3e-14, 0.0]), 512).tolist() == [
        True, True, False, False]
    assert not varying_components(np.zeros(3), 3).any()
    assert not varying_components(np.array([]), 3).any()


@pytest.mark.parametrize("rows, dim, rank", [(2000, 64, 40), (330, 512, 512), (3000, 256, 200)])
def test_the_components_kept_are_the_rows_rank(rows, dim, rank):
    """Seeded rows of a known rank, as many rows as make scikit-learn take its full SVD
    or its covariance eigendecomposition: exactly rank (rows - 1 at most, once centred)
    components are kept."""
    rng = np.random.default_rng(dim)
    train = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, dim))
    ours = VectorizedPCA(standardization=True, whiten=True, random_state=0).fit(train)
    assert len(ours.selected_components_) == min(rank, rows - 1)
