"""VectorIndex: exact kNN with filters, deduplication, IVF switch."""

from __future__ import annotations

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.records import RowFilter
from envad.server.index import VectorIndex
from envad.server.store import EmbeddingStore, Row


def table(tmp_path, n=50, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    store = EmbeddingStore(tmp_path, "m", dim)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    store.insert([Row(id=f"r{i}", vector=vectors[i], env=f"e{i % 3}", split="train",
                      label=str(i % 2)) for i in range(n)])
    return store.read(), vectors


def test_matches_brute_force(tmp_path):
    data, vectors = table(tmp_path)
    index = VectorIndex(8)
    assert index.add_table(data) == 50
    query = vectors[:3] + 0.01
    hits = index.search(query, 5)
    ids = data.column("id").to_pylist()
    for q, row in zip(query, hits, strict=True):
        expected = np.argsort(((vectors - q) ** 2).sum(1))[:5]
        got = [h.id for h in row]
        assert got == [f"r{i}" for i in expected]
        assert row[0].distance == pytest.approx(np.sqrt(((vectors[expected[0]] - q) ** 2).sum()),
                                                rel=1e-4)
    assert set(ids) == index.ids()


def test_filter_and_dedup(tmp_path):
    data, vectors = table(tmp_path)
    index = VectorIndex(8)
    index.add_table(data)
    assert index.add_table(data) == 0 and len(index) == 50
    hits = index.search(vectors[:1], 10, RowFilter(envs=("e1",), labels=("1",)))[0]
    assert hits and all(h.env == "e1" and h.label == "1" for h in hits)
    assert index.search(vectors[:1], 3, RowFilter(envs=("nowhere",))) == [[]]


def test_switches_to_ivf_and_still_finds_exact_matches(tmp_path):
    data, vectors = table(tmp_path, n=400)
    index = VectorIndex(8, ivf_threshold=300)
    index.add_table(data.slice(0, 200))
    index.add_table(data.slice(200))
    assert index.kind == "ivf" and len(index) == 400
    hits = index.search(vectors[[5, 305]], 1)
    assert [h[0].id for h in hits] == ["r5", "r305"]
    filtered = index.search(vectors[[5]], 3, RowFilter(envs=("e2",)))[0]
    assert all(h.env == "e2" for h in filtered)


def test_bad_queries_rejected():
    index = VectorIndex(4)
    with pytest.raises(InvalidInput):
        index.search(np.zeros((1, 3)), 1)
    with pytest.raises(InvalidInput):
        index.search(np.full((1, 4), np.nan), 1)
    assert index.search(np.zeros((2, 4)), 3) == [[], []]
