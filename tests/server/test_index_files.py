"""The index saved next to a real LanceDB store: loaded at start, rebuilt when not usable."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from envad.records import RowFilter
from envad.server import ann, id_positions, index_files
from envad.server.index import VectorIndex
from envad.server.index_files import MANIFEST, open_index, save_index
from envad.server.store import EmbeddingStore, Row
from envad.server.writer import StoreWriter

DIM = 8


def rows(start: int, stop: int, seed: int = 0) -> list[Row]:
    vectors = np.random.default_rng(seed).normal(size=(stop, DIM)).astype(np.float32)
    return [Row(id=f"r{i}", vector=vectors[i], env=f"e{i % 3}", split="train",
                label="anomaly" if i % 5 == 0 else "ok") for i in range(start, stop)]


def exact(store: EmbeddingStore, queries: np.ndarray, k: int,
          envs: tuple[str, ...] = ()) -> list[list[str]]:
    """The k nearest stored ids by brute force over the whole table."""
    table = store.read()
    if envs:
        keep = np.isin(np.asarray(table.column("env").to_pylist()), envs)
        table = table.filter(keep)
    ids = np.asarray(table.column("id").to_pylist())
    vectors = np.stack(table.column("vector").to_numpy(zero_copy_only=False))
    out = []
    for q in queries:
        order = np.argsort(((vectors - q) ** 2).sum(1), kind="stable")[:k]
        out.append(ids[order].tolist())
    return out


def found(index, queries: np.ndarray, k: int, envs: tuple[str, ...] = ()) -> list[list[str]]:
    return [[h.id for h in row] for row in index.search(queries, k, RowFilter(envs=envs))]


def queries(n: int = 6) -> np.ndarray:
    return np.random.default_rng(9).normal(size=(n, DIM)).astype(np.float32)


def saved_store(tmp_path: Path, n: int = 300) -> tuple[EmbeddingStore, Path]:
    store = EmbeddingStore(tmp_path / "lancedb", "m", DIM)
    store.insert(rows(0, n))
    directory = tmp_path / "index"
    first = open_index(directory, store)
    assert not first.loaded and first.reason.startswith("no saved index")
    assert (directory / MANIFEST).is_file()
    return store, directory


def data_file(directory: Path) -> Path:
    return directory / json.loads((directory / MANIFEST).read_text())["index_file"]


def test_a_restart_loads_the_saved_index_and_adds_only_newer_rows(tmp_path):
    store, directory = saved_store(tmp_path)
    store.insert(rows(300, 420))
    opened = open_index(directory, store)
    assert opened.loaded and opened.added == 120 and len(opened.index) == 420
    assert found(opened.index, queries(), 7) == exact(store, queries(), 7)
    assert (found(opened.index, queries(), 5, ("e1",))
            == exact(store, queries(), 5, ("e1",)))
    assert opened.saved_rows == 300                        # 120 rows: not worth a save yet
    store.insert(rows(420, 420 + index_files.SAVE_MIN_ROWS))
    many = open_index(directory, store)
    assert many.loaded and many.saved_rows == len(many.index) == 420 + index_files.SAVE_MIN_ROWS
    assert open_index(directory, store).added == 0         # those were saved at once


def test_labels_come_from_the_store_not_the_saved_index(tmp_path):
    store, directory = saved_store(tmp_path)
    store.set_label(["r1", "r2"], "anomaly")
    index = open_index(directory, store).index
    hits = index.search(queries(1), 300, exclude_labels=("anomaly",))[0]
    assert {"r1", "r2", "r5"}.isdisjoint(h.id for h in hits) and len(hits) == 238


def test_relabelled_rows_keep_their_labels_cameras_and_positions(tmp_path):
    """Relabelling moves rows to the table's end, so the saved order no longer matches the
    store's: each saved row is found in the store by id (the other path, when nothing
    moved, takes rows 0..n-1 as they are)."""
    store, directory = saved_store(tmp_path)
    store.set_label(["r1", "r2", "r7"], "anomaly")
    store.insert(rows(300, 330))
    opened = open_index(directory, store)
    assert opened.loaded and opened.added == 30 and len(opened.index) == 330
    for envs in ((), ("e1",), ("e2",)):
        assert found(opened.index, queries(), 9, envs) == exact(store, queries(), 9, envs)
    hits = opened.index.search(queries(1), 330, exclude_labels=("anomaly",))[0]
    assert {"r1", "r2", "r7"}.isdisjoint(h.id for h in hits) and len(hits) == 330 - 69
    assert opened.stored_ids is not None
    assert sorted(opened.stored_ids.ids.array().to_pylist()) == sorted(
        store.id_column().to_pylist())


@pytest.mark.parametrize("relabel", [False, True], ids=["in order", "by id"])
def test_a_load_and_its_writer_hash_each_stored_id_once(tmp_path, monkeypatch, relabel):
    """The writer gets a copy of the ids the index hashed: at a million rows a second
    hashing costs 0.3-0.5 s of every start."""
    store, directory = saved_store(tmp_path)
    if relabel:
        store.set_label(["r1"], "anomaly")
    store.insert(rows(300, 330))
    monkeypatch.setattr(id_positions, "MERGE_MIN", 10)    # hashed as at a million rows
    hashed = []
    real_hash = id_positions.id_hash
    monkeypatch.setattr(id_positions, "id_hash", lambda i: hashed.append(i) or real_hash(i))
    opened = open_index(directory, store)
    writer = StoreWriter(store, opened.index, stored_ids=opened.stored_ids)
    assert len(hashed) < 2 * 330 and set(hashed) == {f"r{i}" for i in range(330)}
    result = writer.write(rows(325, 335))
    writer.close()
    assert result.duplicates == tuple(f"r{i}" for i in range(325, 330))
    assert len(opened.index) == 335 and opened.index.id_positions().position("r334") >= 0


def test_saved_rows_match_the_store_in_order_or_by_id():
    stored = pa.array(["a", "b", "c", "d"])
    where, missing = index_files._match_saved_rows(pa.array(["a", "b"]), stored)
    assert where is None and missing.to_pylist() == ["c", "d"]
    where, missing = index_files._match_saved_rows(pa.array(["d", "a"]), stored)
    assert where.to_pylist() == [3, 0] and missing.to_pylist() == ["b", "c"]
    with pytest.raises(index_files.StaleIndex, match="1 saved rows are not in the store"):
        index_files._match_saved_rows(pa.array(["a", "zz"]), stored)


def truncate(directory: Path) -> None:
    path = data_file(directory)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_a_byte(directory: Path) -> None:
    path = data_file(directory)
    data = bytearray(path.read_bytes())
    data[len(data) - 7] ^= 0xFF                       # a vector byte; the size is unchanged
    path.write_bytes(bytes(data))


def delete_data(directory: Path) -> None:
    data_file(directory).unlink()


def delete_all(directory: Path) -> None:
    for path in directory.iterdir():
        path.unlink()


def garble_manifest(directory: Path) -> None:
    (directory / MANIFEST).write_text("{not json")


def other_model(directory: Path) -> None:
    manifest = json.loads((directory / MANIFEST).read_text())
    (directory / MANIFEST).write_text(json.dumps({**manifest, "model_id": "other"}))


@pytest.mark.parametrize("damage, reason", [
    (truncate, "truncated"), (flip_a_byte, "corrupt"), (delete_data, "missing"),
    (delete_all, "no saved index"), (garble_manifest, "unreadable manifest"),
    (other_model, "for model 'other'"),
])
def test_a_damaged_saved_index_is_rebuilt_never_trusted(tmp_path, caplog, damage, reason):
    store, directory = saved_store(tmp_path)
    damage(directory)
    with caplog.at_level("INFO", logger="envad.server.index_files"):
        opened = open_index(directory, store)
    assert not opened.loaded and reason in opened.reason
    assert any(reason in r.getMessage() for r in caplog.records)
    assert found(opened.index, queries(), 7) == exact(store, queries(), 7)
    assert open_index(directory, store).loaded                  # the rebuild was saved


def test_an_index_saved_for_another_table_is_rebuilt(tmp_path):
    _, directory = saved_store(tmp_path / "a")
    other = EmbeddingStore(tmp_path / "b" / "lancedb", "m", DIM)
    other.insert([Row(id=f"x{i}", vector=np.full(DIM, i, np.float32)) for i in range(50)])
    opened = open_index(directory, other)
    assert not opened.loaded and "not in the store table" in opened.reason
    assert found(opened.index, queries(), 5) == exact(other, queries(), 5)


def test_saved_vectors_that_differ_from_the_store_are_rebuilt(tmp_path):
    _, directory = saved_store(tmp_path / "a")
    same_ids = EmbeddingStore(tmp_path / "b" / "lancedb", "m", DIM)
    same_ids.insert(rows(0, 300, seed=1))                 # same ids, other vectors
    opened = open_index(directory, same_ids)
    assert not opened.loaded and "differs from the store" in opened.reason
    assert found(opened.index, queries(), 5) == exact(same_ids, queries(), 5)


def test_an_ivf_index_is_saved_with_its_training_and_probes(tmp_path):
    store = EmbeddingStore(tmp_path / "lancedb", "m", DIM)
    store.insert(rows(0, 600))
    directory = tmp_path / "index"
    built = open_index(directory, store, ivf_threshold=400).index
    assert built.kind == "ivf" and built.trained_rows == 600
    store.insert(rows(600, 700))
    loaded = open_index(directory, store, ivf_threshold=400)
    assert loaded.loaded and loaded.added == 100
    assert loaded.index.kind == "ivf" and loaded.index.trained_rows == 600
    assert loaded.index._index.nprobe == built._index.nprobe
    own = found(loaded.index, np.stack([r.vector for r in rows(0, 700)])[[3, 650]], 1)
    assert own == [["r3"], ["r650"]]


def test_a_rebuild_reads_the_store_in_batches_and_trains_ivf_once_for_all_rows(
        tmp_path, monkeypatch):
    store = EmbeddingStore(tmp_path / "lancedb", "m", DIM)
    store.insert(rows(0, 600))
    monkeypatch.setattr(index_files, "BUILD_BATCH_ROWS", 128)     # 5 batches
    batches: list[int] = []
    reader = store.iter_batches

    def counted(*args, **kwargs):
        for batch in reader(*args, **kwargs):
            batches.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(store, "iter_batches", counted)
    trained_after: list[int] = []
    trained_kind = ann.trained_kind

    def recorded(*args):
        trained_after.append(len(batches))
        return trained_kind(*args)

    monkeypatch.setattr(ann, "trained_kind", recorded)
    built = open_index(tmp_path / "index", store, ivf_threshold=400).index
    assert batches == [128, 128, 128, 128, 88]
    # trained once, for the whole table, before its first batch was read (so the batches
    # go straight into the lists: no flat index of every row), not on the 512 rows that
    # crossed the threshold
    assert trained_after == [0]
    assert built.kind == "ivf" and built.trained_rows == 600
    assert built._index.nlist == ann.nlist_for(600)
    own = found(built, np.stack([r.vector for r in rows(0, 600)])[[0, 599]], 1)
    assert own == [["r0"], ["r599"]]


@pytest.mark.parametrize("kind", ["ivf", "ivf-sq8"])
def test_a_rebuild_trained_first_equals_one_switched_after_reading_every_row(tmp_path, kind):
    store = EmbeddingStore(tmp_path / "lancedb", "m", DIM)
    store.insert(rows(0, 700))
    vectors = np.stack([r.vector for r in rows(0, 700)])
    assert np.array_equal(store.vectors_at(np.array([699, 0, 350])), vectors[[699, 0, 350]])
    thresholds = {"ivf_threshold": 400, "compressed_threshold": 500 if kind == "ivf-sq8"
                  else 10_000}
    first = VectorIndex(DIM, **thresholds)
    first.rebuild(store.iter_batches(batch_size=128), store.count(), store.vectors_at)
    after = VectorIndex(DIM, **thresholds)
    after.add_batches(store.iter_batches(batch_size=128))
    assert first.kind == after.kind == kind and first.trained_rows == after.trained_rows
    assert first._index.nprobe == after._index.nprobe
    assert np.array_equal(first.vectors_at(np.arange(700)), after.vectors_at(np.arange(700)))
    assert found(first, queries(), 5) == found(after, queries(), 5)
    assert found(first, queries(), 5, ("e1",)) == exact(store, queries(), 5, ("e1",))


SAVER = """
import sys
from pathlib import Path
from envad.server.index_files import open_index, save_index
from envad.server.store import EmbeddingStore
store = EmbeddingStore(Path(sys.argv[1]), "m", int(sys.argv[3]))
index = open_index(Path(sys.argv[2]), store).index
print("saved", flush=True)
while True:
    save_index(Path(sys.argv[2]), index, model_id="m", table_version=store.version)
"""


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.45])
def test_a_kill_during_a_save_leaves_a_complete_saved_index(tmp_path, delay):
    dim = 64
    store = EmbeddingStore(tmp_path / "lancedb", "m", dim)
    vectors = np.random.default_rng(0).normal(size=(40_000, dim)).astype(np.float32)
    store.insert([Row(id=f"r{i}", vector=v) for i, v in enumerate(vectors)])
    directory = tmp_path / "index"
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path / "lancedb"),
                              str(directory), str(dim)], stdout=subprocess.PIPE, text=True)
    try:
        assert saver.stdout is not None and saver.stdout.readline().strip() == "saved"
        time.sleep(delay)
    finally:
        saver.send_signal(signal.SIGKILL)
        saver.wait()
    opened = open_index(directory, store)
    assert opened.loaded and opened.added == 0, opened.reason
    assert found(opened.index, vectors[[7, 39_999]], 1) == [["r7"], ["r39999"]]
    files = {p.name for p in directory.iterdir()}
    assert len(files) == 3, files                       # leftovers of the killed save removed


def test_a_save_writes_only_complete_files_and_removes_older_ones(tmp_path):
    store, directory = saved_store(tmp_path)
    index = open_index(directory, store).index
    before = {p.name for p in directory.iterdir()}
    (directory / "index-1.faiss").write_bytes(b"half a file")   # an interrupted save
    assert save_index(directory, index, model_id="m", table_version=store.version) == 300
    after = {p.name for p in directory.iterdir()}
    assert len(after) == 3 and MANIFEST in after and not (after - {MANIFEST}) & before


def test_saving_is_due_after_a_share_of_new_rows():
    assert not index_files.due_for_saving(100, 100)
    assert not index_files.due_for_saving(index_files.SAVE_MIN_ROWS - 1, 0)
    assert index_files.due_for_saving(index_files.SAVE_MIN_ROWS, 0)
    assert not index_files.due_for_saving(1_200_000, 1_000_000)
    assert index_files.due_for_saving(1_250_000, 1_000_000)
