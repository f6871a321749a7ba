"""IVF training, probe calibration and the filter's probe scaling, on clustered data."""

from __future__ import annotations

import faiss
import numpy as np

from envad.server import ann


def clustered(n: int, dim: int = 16, clusters: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)).astype(np.float32) * 4
    return (centres[rng.integers(clusters, size=n)]
            + rng.normal(size=(n, dim)).astype(np.float32))


def flat(vectors: np.ndarray) -> faiss.IndexFlatL2:
    index = faiss.IndexFlatL2(vectors.shape[1])
    index.add(vectors)
    return index


def test_build_keeps_every_position_and_trains_on_a_capped_sample(caplog):
    vectors = clustered(3000)
    with caplog.at_level("INFO", logger="envad.server.ann"):
        ivf = ann.build_ivf(flat(vectors[:2000]), vectors[2000:])
    assert ivf.ntotal == 3000 and ivf.nlist == ann.nlist_for(3000) == 219
    np.testing.assert_array_equal(ann.rows_of(ivf, np.array([0, 1999, 2000, 2999])),
                                  vectors[[0, 1999, 2000, 2999]])
    trained_on = min(3000, ann.TRAIN_POINTS_PER_LIST * 219)
    assert f"trained on {trained_on} of 3000 rows" in caplog.text


def test_calibrated_probes_reach_the_recall_target_on_unseen_queries():
    everything = clustered(6300)                      # one distribution, 300 rows held out
    vectors, unseen = everything[:6000], everything[6000:]
    ivf = ann.build_ivf(flat(vectors), np.zeros((0, 16), np.float32))
    assert 1 <= ivf.nprobe < ivf.nlist
    _, truth = flat(vectors).search(unseen, 10)
    _, got = ivf.search(unseen, 10)
    assert ann.recall_at_k(got, truth) >= 0.95
    half = ann.calibrate_nprobe(ivf, target=0.5)
    assert half <= ivf.nprobe


def test_training_is_seeded():
    vectors = clustered(2000)
    one = ann.build_ivf(flat(vectors), np.zeros((0, 16), np.float32))
    two = ann.build_ivf(flat(vectors), np.zeros((0, 16), np.float32))
    queries = clustered(2050)[2000:]
    assert one.nprobe == two.nprobe
    np.testing.assert_array_equal(one.search(queries, 5)[1], two.search(queries, 5)[1])


def test_a_narrow_filter_probes_more_lists(monkeypatch):
    ivf = ann.build_ivf(flat(clustered(2000)), np.zeros((0, 16), np.float32))
    ivf.nprobe = 4
    assert ann.probes_for(ivf, 1) == ann.probes_for(ivf, 2000) == ivf.nlist   # small: exact
    monkeypatch.setattr(ann, "EXACT_FILTER_ROWS", 100)
    assert ann.probes_for(ivf, 2000) == 4
    assert ann.probes_for(ivf, 500) == 16
    assert ann.probes_for(ivf, 101) == min(ivf.nlist, 80)


def test_retraining_is_due_after_the_documented_growth():
    assert not ann.needs_retraining(100, 0)
    assert not ann.needs_retraining(799, 200)
    assert ann.needs_retraining(200 * ann.RETRAIN_GROWTH, 200)


def test_recall_counts_shared_ids():
    truth = np.array([[1, 2, 3, 4], [5, 6, -1, -1]])
    assert ann.recall_at_k(np.array([[1, 2, 9, 9], [6, 5, 0, 0]]), truth) == 4 / 6
