"""VectorIndex: exact kNN with filters, deduplication, IVF switch."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest

from envad.errors import InvalidInput
from envad.records import RowFilter
from envad.server.index import CodedColumn, VectorIndex, _Bitmap
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


def labelled_index(tmp_path, n=40, dim=8):
    """Rows r0..r{n-1}; every 4th labelled "anomaly"; r1 and r2 share r0's content hash."""
    rng = np.random.default_rng(3)
    store = EmbeddingStore(tmp_path, "m", dim)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    store.insert([Row(id=f"r{i}", vector=vectors[i], env=f"e{i % 2}", split="train",
                      label="anomaly" if i % 4 == 0 else "ok",
                      sha256="same" if i < 3 else f"h{i}") for i in range(n)])
    index = VectorIndex(dim)
    index.add_table(store.read())
    return index, vectors


def test_a_query_is_not_its_own_neighbour_by_id_or_content(tmp_path):
    index, vectors = labelled_index(tmp_path)
    own = index.search(vectors[[5]], 3)[0]
    assert own[0].id == "r5" and own[0].distance == 0.0      # what the evidence must not be
    hits = index.search(vectors[[5]], 3, exclude_self=[("r5", "h5")])[0]
    assert len(hits) == 3 and "r5" not in {h.id for h in hits}
    twins = index.search(vectors[[0]], 5, exclude_self=[("r0", "same")])[0]
    assert len(twins) == 5 and not {"r0", "r1", "r2"} & {h.id for h in twins}
    everything = index.search(vectors[[0]], 100, exclude_self=[("r0", "same")])[0]
    assert len(everything) == 37                             # all rows but r0 and its twins


def test_rows_labelled_as_anomalies_are_left_out_on_request(tmp_path):
    index, vectors = labelled_index(tmp_path)
    hits = index.search(vectors[[8, 9]], 10, exclude_labels=("anomaly",))
    assert all(len(row) == 10 and all(h.label == "ok" for h in row) for row in hits)
    assert index.search(vectors[[8]], 1)[0][0].id == "r8"
    both = index.search(vectors[[8]], 4, RowFilter(envs=("e0",)), exclude_labels=("anomaly",),
                        exclude_self=[("r8", "h8")])[0]
    assert len(both) == 4 and all(h.env == "e0" and h.label == "ok" for h in both)


def test_a_filter_bitmap_is_extended_with_new_rows_not_rebuilt(tmp_path):
    data, vectors = table(tmp_path, n=60)
    index = VectorIndex(8)
    index.add_table(data.slice(0, 30))
    only_e1 = RowFilter(envs=("e1",))
    first = index.search(vectors[:1], 30, only_e1)[0]
    assert len(first) == 10
    bitmap = index._bitmaps[(("e1",), (), (), ())]
    index.add_table(data.slice(30))
    second = index.search(vectors[:1], 30, only_e1)[0]
    assert len(second) == 20 and all(h.env == "e1" for h in second)
    assert index._bitmaps[(("e1",), (), (), ())] is bitmap and bitmap.rows == 60


def test_rows_after_ivf_training_join_the_lists_and_retrain_only_after_growth(tmp_path,
                                                                            caplog):
    data, vectors = table(tmp_path, n=1300)
    index = VectorIndex(8, ivf_threshold=300)
    index.add_table(data.slice(0, 300))
    trained = index._index
    assert index.kind == "ivf" and index.trained_rows == 300
    for start in range(300, 1100, 100):
        index.add_table(data.slice(start, 100))
    index.add_table(data.slice(1100, 99))                # 1,199 rows: below 4 x 300
    assert index._index is trained and index.trained_rows == 300
    with caplog.at_level("INFO", logger="envad.server.index"):
        index.add_table(data.slice(1199))
    assert "grew from 300 rows at training to 1300 (4x): retraining IVF" in caplog.text
    assert index._index is not trained and index.trained_rows == 1300
    hits = index.search(vectors[[0, 700, 1299]], 1)
    assert [h[0].id for h in hits] == ["r0", "r700", "r1299"]


def test_a_narrow_filter_on_ivf_still_finds_k_rows(tmp_path):
    data, vectors = table(tmp_path, n=2000)
    index = VectorIndex(8, ivf_threshold=500)
    index.add_table(data)
    index._index.nprobe = 1
    hits = index.search(vectors[:5], 10, RowFilter(envs=("e1",), labels=("1",)))
    allowed = np.asarray([i for i in range(2000) if i % 3 == 1 and i % 2 == 1])
    for q, row in zip(vectors[:5], hits, strict=True):          # exact over the allowed rows
        nearest = allowed[np.argsort(((vectors[allowed] - q) ** 2).sum(1))[:10]]
        assert [h.id for h in row] == [f"r{i}" for i in nearest]


def test_searches_go_on_while_a_snapshot_is_saved_and_adds_wait(tmp_path):
    import threading

    data, vectors = table(tmp_path, n=60)
    index = VectorIndex(8)
    index.add_table(data.slice(0, 40))
    added = threading.Event()

    def add_rest():
        index.add_table(data.slice(40))
        added.set()

    with index.snapshot() as snap:
        adder = threading.Thread(target=add_rest)
        adder.start()
        searched: list = []
        searcher = threading.Thread(target=lambda: searched.append(index.search(vectors[:1], 1)))
        searcher.start()
        searcher.join(10)
        assert searched and searched[0][0][0].id == "r0"        # not blocked by the save
        assert not added.wait(0.3) and snap.faiss_index.ntotal == len(snap.ids) == 40
    adder.join(10)
    assert added.is_set() and len(index) == 60


def test_rows_added_soon_are_found_by_every_read_that_starts_after(tmp_path):
    data, vectors = table(tmp_path, n=60)
    index = VectorIndex(8)
    for start in range(0, 60, 20):          # what the writer does after each commit
        index.add_table_soon(data.slice(start, 20))
    hits = index.search(vectors[59:60], 1)   # started after the last hand-over
    assert hits[0][0].id == "r59"
    assert len(index) == 60 and "r0" in index and index.ids() == {f"r{i}" for i in range(60)}
    with index.snapshot() as snap:
        assert snap.faiss_index.ntotal == 60


def test_a_failed_add_soon_is_logged_and_reads_do_not_wait_for_it(tmp_path, caplog):
    data, _ = table(tmp_path, n=10)
    index = VectorIndex(4)                   # the table's 8-d vectors do not fit
    index.add_table_soon(data)
    index.flush()
    assert len(index) == 0 and index.search(np.zeros((1, 4), np.float32), 3) == [[]]
    assert "index add failed" in caplog.text


def test_rows_added_while_ivf_trains_in_the_background_are_found_and_moved_into_it(
        tmp_path, monkeypatch):
    """The writer's path (add_table_soon): crossing the threshold starts IVF training in
    a thread of its own; meanwhile rows keep coming in and are found (flat, exact); once
    trained, every row is in the IVF index, those added during the training too."""
    from envad.server import ann

    data, vectors = table(tmp_path, n=500)
    index = VectorIndex(8, ivf_threshold=300)
    training_started, release = threading.Event(), threading.Event()
    train = ann.trained_ivf

    def held_back(sample, nlist):          # the real training, once the test lets it go
        training_started.set()
        assert release.wait(30)
        return train(sample, nlist)

    monkeypatch.setattr(ann, "trained_ivf", held_back)
    for start in range(0, 300, 100):
        index.add_table_soon(data.slice(start, 100))
    assert training_started.wait(30)
    for start in range(300, 500, 50):      # arrive while the IVF index is trained
        index.add_table_soon(data.slice(start, 50))
    index.flush()
    assert index.kind == "flat" and len(index) == 500
    assert [h[0].id for h in index.search(vectors[[10, 450]], 1)] == ["r10", "r450"]
    release.set()
    index.wait_for_training()
    assert index.kind == "ivf" and index.trained_rows == 500
    assert index._index.ntotal == 500
    own = index.search(vectors[[0, 299, 300, 499]], 1)
    assert [h[0].id for h in own] == ["r0", "r299", "r300", "r499"]


def test_a_filter_bitmap_grows_a_bit_a_row_and_never_allows_rows_past_its_end():
    """Extended in pieces of any size, the bitmap equals the packed mask of every row; a
    search holding an earlier one reads it unchanged; FAISS's selector over it allows no
    row it does not cover (a row added after the filter was extended)."""
    mask = np.random.default_rng(0).random(1000) < 0.4
    bitmap, held = _Bitmap(), []
    for start, stop in ((0, 3), (3, 3), (3, 21), (21, 22), (22, 517), (517, 1000)):
        held.append((bitmap.packed, bitmap.rows))
        bitmap.extend(mask[start:stop])
    np.testing.assert_array_equal(bitmap.packed, np.packbits(mask, bitorder="little"))
    assert (bitmap.rows, bitmap.count) == (1000, int(mask.sum()))
    for packed, rows in held:
        np.testing.assert_array_equal(packed, np.packbits(mask[:rows], bitorder="little"))
    selector = bitmap.selector()
    assert [selector.is_member(i) for i in range(1000)] == mask.tolist()
    assert not any(selector.is_member(i) for i in range(1000, 1100))


def test_coded_columns_take_the_narrowest_code_type_and_widen_when_needed():
    column = CodedColumn()
    column.extend(pa.array(["cam-a", None, "cam-b"]))
    assert column.codes().dtype == np.uint8
    column.extend(pa.array([f"cam-{i}" for i in range(300)]))
    assert column.codes().dtype == np.uint16
    column.assign(np.array([0]), "cam-new")
    assert column.at(np.array([0, 1, 2, 302])) == ["cam-new", "", "cam-b", "cam-299"]
    assert column.isin(["cam-b", "cam-299"], 0, len(column.codes())).nonzero()[0].tolist() == [
        2, 302]
