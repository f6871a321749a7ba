"""StoreWriter: single writer, concurrent callers, no duplicates, failures reported."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from envad.errors import ResourceExhausted
from envad.server.index import VectorIndex
from envad.server.store import EmbeddingStore, Row
from envad.server.writer import StoreWriter


def make_rows(ids):
    return [Row(id=i, vector=np.full(4, hash(i) % 97, np.float32), env="e") for i in ids]


def test_concurrent_writers_of_the_same_ids_store_each_once(tmp_path):
    store = EmbeddingStore(tmp_path, "m", 4)
    index = VectorIndex(4)
    writer = StoreWriter(store, index)
    ids = [f"id-{i}" for i in range(40)]
    results = []

    def worker(seed):
        order = list(np.random.default_rng(seed).permutation(ids))
        results.append(writer.write(make_rows(order)))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    assert store.count() == 40 and len(index) == 40
    assert sum(len(r.inserted) for r in results) == 40
    assert sum(len(r.duplicates) for r in results) == 200


def test_failed_write_acknowledges_nothing_and_writer_recovers(tmp_path):
    store = EmbeddingStore(tmp_path, "m", 4)
    writer = StoreWriter(store, VectorIndex(4))
    original = store.insert

    def full_disk(rows):
        raise OSError(28, "No space left on device")

    store.insert = full_disk
    with pytest.raises(ResourceExhausted, match="nothing was written"):
        writer.write(make_rows(["a", "b"]))
    store.insert = original
    assert writer.write(make_rows(["a", "b"])).inserted == ("a", "b")
    assert store.count() == 2
    writer.close()
