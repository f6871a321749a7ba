"""The compressed index kind (IVF over 8-bit codes) on clustered rows, with low thresholds
so that a few thousand rows exercise it: recall against exact search, memory per row,
filters and evidence rules, rows added after training, retraining, save and load.

It is the kind of a store table without stable row ids (created by another tool: every
table envad creates has them and takes the re-ranked kind, test_index_reranked.py), so
these stores are created that way."""

from __future__ import annotations

import faiss
import lancedb
import numpy as np
import pytest

from envad.records import RowFilter
from envad.server import ann
from envad.server.index import VectorIndex
from envad.server.index_files import open_index, save_index
from envad.server.store import EmbeddingStore, Row, make_schema, table_name

DIM = 32
#: recall@10 against exact search the compressed index must reach on these rows. IVF's
#: calibration aims at 0.97 of the exact answer and the 8-bit codes lose a little more:
#: on the 512-d benchmark rows it measured 0.986 at 100k rows and 0.958 at 1M
#: (docs/neighbour-index.md); here, at 32 dims, 0.981-0.990 over four seeds. 0.9 leaves
#: room for the seed, not for a broken index (a wrong list assignment or decoding falls
#: far below)
RECALL_FLOOR = 0.9


def clustered(n: int, seed: int = 0) -> np.ndarray:
    """Rows of 40 Gaussian clusters (rows i and j of two calls with one seed agree)."""
    centres = np.random.default_rng(seed).normal(size=(40, DIM)).astype(np.float32) * 4
    rng = np.random.default_rng((seed, n))
    return centres[rng.integers(40, size=n)] + rng.normal(size=(n, DIM)).astype(np.float32)


def store_without_stable_row_ids(db_dir, model_id: str = "m", dim: int = DIM
                                 ) -> EmbeddingStore:
    """A store whose table was created without stable row ids (as another tool would)."""
    lancedb.connect(str(db_dir)).create_table(table_name(model_id), schema=make_schema(dim))
    store = EmbeddingStore(db_dir, model_id, dim)
    assert not store.has_stable_row_ids
    return store


def store_of(tmp_path, vectors: np.ndarray) -> EmbeddingStore:
    store = store_without_stable_row_ids(tmp_path / "lancedb")
    store.insert([Row(id=f"r{i}", vector=v, env=f"e{i % 3}", split=("train", "val")[i % 2],
                      label="anomaly" if i % 5 == 0 else "ok", sha256=f"h{i}")
                  for i, v in enumerate(vectors)])
    return store


def compressed_index(**thresholds: int) -> VectorIndex:
    return VectorIndex(DIM, ivf_threshold=thresholds.get("ivf", 1),
                       compressed_threshold=thresholds.get("compressed", 1))


def exact_ids(vectors: np.ndarray, queries: np.ndarray, k: int,
              allowed: np.ndarray | None = None) -> np.ndarray:
    rows = np.arange(len(vectors)) if allowed is None else allowed
    index = faiss.IndexFlatL2(DIM)
    index.add(vectors[rows])
    return rows[index.search(queries, k)[1]]


def found_ids(index: VectorIndex, queries: np.ndarray, k: int, **how) -> np.ndarray:
    hits = index.search(queries, k, **how)
    return np.asarray([[int(h.id[1:]) for h in row] + [-1] * (k - len(row)) for row in hits])


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """4,000 stored rows and 100 unseen queries of the same clusters."""
    vectors = clustered(4000)
    store = store_of(tmp_path_factory.mktemp("compressed"), vectors)
    return store, vectors, clustered(4100)[4000:]


@pytest.fixture(scope="module")
def built(stored):
    store, _, _ = stored
    index = compressed_index()
    index.add_table(store.read())
    return index


def test_recall_against_exact_search_stays_above_the_floor(stored, built):
    _, vectors, queries = stored
    assert built.kind == ann.COMPRESSED and len(built) == 4000
    assert isinstance(built._index, faiss.IndexIVFScalarQuantizer)
    assert ann.recall_at_k(found_ids(built, queries, 10),
                           exact_ids(vectors, queries, 10)) >= RECALL_FLOOR


def test_the_index_holds_codes_not_vectors(stored, built):
    """Its serialized size per row is the code (one byte a dimension) plus the list id and
    direct map (8 bytes each) plus the centroids' share: a quarter of IVF-flat's vectors.
    Without the compressed kind the same rows take 4 * DIM bytes each and this fails."""
    store, _, _ = stored
    ivf = compressed_index(compressed=10**9)
    ivf.add_table(store.read())
    rows = len(built)
    nlist = ann.nlist_for(rows)
    fixed = (nlist * DIM * 4 + 2 * DIM * 4 + 4096) / rows     # centroids, ranges, headers
    code_bound = DIM + 8 + 8 + fixed
    compressed_bytes = faiss.serialize_index(built._index).nbytes / rows
    vector_bytes = faiss.serialize_index(ivf._index).nbytes / rows
    assert ivf.kind == ann.IVF and built._index.code_size == DIM
    assert compressed_bytes <= code_bound < 4 * DIM < vector_bytes


def test_filters_and_evidence_rules_hold_on_the_compressed_kind(stored, built):
    _, vectors, queries = stored
    camera = built.search(queries[:5], 10, RowFilter(envs=("e1",), splits=("train",)))
    assert all(len(row) == 10 and all(h.env == "e1" and h.split == "train" for h in row)
               for row in camera)
    allowed = np.asarray([i for i in range(4000) if i % 3 == 1 and i % 2 == 0])
    narrow = found_ids(built, queries, 10, row_filter=RowFilter(envs=("e1",),
                                                                 splits=("train",)))
    assert ann.recall_at_k(narrow, exact_ids(vectors, queries, 10, allowed)) >= RECALL_FLOOR
    labelled = built.search(queries[:5], 10, RowFilter(labels=("anomaly",)))
    assert all(len(row) == 10 and all(h.label == "anomaly" for h in row) for row in labelled)
    normal = built.search(queries[:5], 10, exclude_labels=("anomaly",))
    assert all(len(row) == 10 and all(h.label == "ok" for h in row) for row in normal)
    own = built.search(vectors[[7]], 3)[0]
    assert own[0].id == "r7"                            # the decoded row is still nearest
    others = built.search(vectors[[7]], 3, exclude_self=[("r7", "h7")])[0]
    twins = built.search(vectors[[7]], 3, exclude_self=[("r-new", "h7")])[0]
    assert len(others) == len(twins) == 3 and "r7" not in {h.id for h in others + twins}


def test_rows_added_after_training_are_found_at_once(tmp_path):
    vectors = clustered(3000)
    store = store_of(tmp_path, vectors)
    table = store.read()
    index = compressed_index(compressed=2000)
    index.add_table(table.slice(0, 2000))
    trained = index._index
    assert index.kind == ann.COMPRESSED and index.trained_rows == 2000
    for start in range(2000, 3000, 250):                # encoded into the trained lists
        index.add_table(table.slice(start, 250))
        last = start + 249
        assert index.search(vectors[[last]], 1)[0][0].id == f"r{last}"
    assert index._index is trained and trained.ntotal == 3000


def test_an_ivf_index_becomes_compressed_beside_the_writes(tmp_path):
    """The writer's path: crossing compressed_threshold trains the compressed index in a
    thread of its own; every row, those added meanwhile too, ends up in it."""
    vectors = clustered(3000)
    table = store_of(tmp_path, vectors).read()
    index = compressed_index(ivf=500, compressed=2000)
    for start in range(0, 3000, 250):
        index.add_table_soon(table.slice(start, 250))
    index.flush()
    index.wait_for_training()
    assert index.kind == ann.COMPRESSED and index._index.ntotal == len(index) == 3000
    assert index.search(vectors[[0, 1999, 2999]], 1) and [
        h[0].id for h in index.search(vectors[[0, 1999, 2999]], 1)] == ["r0", "r1999", "r2999"]


def test_a_retrained_compressed_index_keeps_its_recall_and_decoded_rows(tmp_path):
    """Retraining re-encodes decoded rows (the vectors are not held): the codes drift by
    at most a quantization step, far inside the load check's tolerance."""
    vectors = clustered(4000)
    queries = clustered(4100)[4000:]
    table = store_of(tmp_path, vectors).read()
    index = compressed_index()
    index.add_table(table.slice(0, 1000))
    first = index._index
    index.add_table(table.slice(1000))                   # 4x: retrained
    assert index._index is not first and index.trained_rows == 4000
    assert ann.recall_at_k(found_ids(index, queries, 10),
                           exact_ids(vectors, queries, 10)) >= RECALL_FLOOR
    decoded = index.vectors_at(np.arange(1000))
    error = np.linalg.norm(decoded - vectors[:1000], axis=1) / np.linalg.norm(
        vectors[:1000], axis=1)
    assert error.max() < ann.COMPRESSED_TOLERANCE / 2


def test_a_store_crossing_the_threshold_switches_the_saved_kind_at_load(tmp_path):
    vectors = clustered(3000)
    store = store_of(tmp_path, vectors[:1500])
    directory = tmp_path / "index"
    settings = {"ivf_threshold": 500, "compressed_threshold": 2000}
    assert open_index(directory, store, **settings).index.kind == ann.IVF
    store.insert([Row(id=f"r{i}", vector=vectors[i], env="e0") for i in range(1500, 3000)])
    crossed = open_index(directory, store, **settings)
    assert crossed.loaded and crossed.added == 1500
    assert crossed.index.kind == ann.COMPRESSED and crossed.saved_rows == 3000
    reloaded = open_index(directory, store, **settings)
    assert reloaded.loaded and reloaded.added == 0 and reloaded.index.kind == ann.COMPRESSED
    lowered = open_index(directory, store, ivf_threshold=500, compressed_threshold=10**9)
    assert not lowered.loaded and "raised" in lowered.reason
    assert lowered.index.kind == ann.IVF                     # rebuilt from the store's vectors
    np.testing.assert_array_equal(lowered.index.vectors_at(np.arange(3)), vectors[:3])


def test_a_threshold_lowered_below_a_saved_ivf_index_compresses_it_at_load(tmp_path):
    store = store_of(tmp_path, clustered(1500))
    directory = tmp_path / "index"
    assert open_index(directory, store, ivf_threshold=500).index.kind == ann.IVF
    opened = open_index(directory, store, ivf_threshold=500, compressed_threshold=1000)
    assert opened.loaded and opened.added == 0 and opened.index.kind == ann.COMPRESSED
    assert open_index(directory, store, ivf_threshold=500,
                      compressed_threshold=1000).index.kind == ann.COMPRESSED


def test_compressed_vectors_that_differ_from_the_store_are_rebuilt(tmp_path):
    vectors = clustered(1500)
    directory = tmp_path / "index"
    open_index(directory, store_of(tmp_path / "a", vectors), compressed_threshold=1,
               ivf_threshold=1)
    other = store_of(tmp_path / "b", vectors + 3.0)        # same ids, other vectors
    opened = open_index(directory, other, compressed_threshold=1, ivf_threshold=1)
    assert not opened.loaded and "differs from the store" in opened.reason


def test_rows_from_outside_the_trained_range_do_not_make_every_start_rebuild(tmp_path):
    """Rows stored after the codes were trained, far from every row they were trained on
    (a new camera, night images), decode far from their vectors (clipped codes); the
    load check compares them with their own encoding, so the saved index is loaded."""
    vectors = clustered(3000)
    store = store_of(tmp_path, vectors)
    directory = tmp_path / "index"
    first = open_index(directory, store, ivf_threshold=1, compressed_threshold=1000)
    assert first.index.kind == ann.COMPRESSED
    outside = clustered(8, seed=5) * 10.0
    store.insert([Row(id=f"o{i}", vector=v, env="night") for i, v in enumerate(outside)])
    grown = open_index(directory, store, ivf_threshold=1, compressed_threshold=1000)
    assert grown.loaded and grown.added == 8
    decoded = grown.index.vectors_at(np.arange(3000, 3008))
    error = np.linalg.norm(decoded - outside, axis=1) / np.linalg.norm(outside, axis=1)
    assert error.min() > ann.COMPRESSED_TOLERANCE         # far from their vectors
    save_index(directory, grown.index, model_id=store.model_id,
               table_version=store.version)
    again = open_index(directory, store, ivf_threshold=1, compressed_threshold=1000)
    assert again.loaded, again.reason
    assert again.added == 0 and again.saved_rows == 3008
