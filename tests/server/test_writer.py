"""StoreWriter: single writer, concurrent callers, no duplicates, failures reported."""

from __future__ import annotations

import errno
import threading
from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pytest

from envad.errors import ResourceExhausted
from envad.server.id_positions import IdPositions
from envad.server.index import VectorIndex
from envad.server.store import EmbeddingStore, Row, StoredIds
from envad.server.writer import StoreWriter, storage_fault, without_paths


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
    original = store.append

    def full_disk(table):
        raise OSError(28, "No space left on device")

    store.append = full_disk  # the disk, outside the machine
    with pytest.raises(ResourceExhausted, match="data directory full: nothing of this write"):
        writer.write(make_rows(["a", "b"]))
    assert isinstance(writer.disk_fault, ResourceExhausted)   # health: writes NOT_SERVING
    assert writer.write(make_rows([])).inserted == ()         # no write: the fault stands
    assert writer.disk_fault is not None
    store.append = original
    assert writer.write(make_rows(["a", "b"])).inserted == ("a", "b")
    assert writer.disk_fault is None                          # a commit went through
    assert store.count() == 2
    writer.close()


def test_a_disk_fault_clears_once_the_folder_takes_a_probe_write(tmp_path, monkeypatch):
    writer = StoreWriter(EmbeddingStore(tmp_path, "m", 4), VectorIndex(4))
    writer.disk_fault = ResourceExhausted("data directory full")
    refused = tmp_path / "not-a-folder"
    refused.write_text("a file: nothing can be created under it")
    writer.recheck_disk(refused)
    assert writer.disk_fault is not None
    writer.recheck_disk(tmp_path)
    assert writer.disk_fault is None
    assert not (tmp_path / ".envad-write-probe").exists()       # the probe is deleted
    writer.close()


def test_a_bad_row_fails_alone_and_other_callers_rows_are_stored(tmp_path):
    """One caller's unwritable row (here a vector of the wrong size) is split off the
    commit group: it fails with its reason, every other row of every caller is stored."""
    store = EmbeddingStore(tmp_path, "m", 4)
    index = VectorIndex(4)
    writer = StoreWriter(store, index)
    writer.close()       # drive one commit group by hand, on this thread
    clean = make_rows([f"clean-{i}" for i in range(400)])
    hostile = make_rows(["h-0", "h-1"]) + [Row(id="h-bad", vector=np.zeros(7, np.float32))]
    clean_future, hostile_future = Future(), Future()
    writer._commit([(clean, clean_future), (hostile, hostile_future)])
    clean_result, hostile_result = clean_future.result(), hostile_future.result()
    assert len(clean_result.inserted) == 400 and clean_result.failed == ()
    assert hostile_result.inserted == ("h-0", "h-1")
    assert [row_id for row_id, _ in hostile_result.failed] == ["h-bad"]
    assert "7 dims" in hostile_result.failed[0][1]
    assert store.count() == 402 and len(index) == 402


def test_stored_ids_are_known_at_start_and_after_another_process_writes(tmp_path):
    """The writer's id set is read at start and re-read after a commit by another
    connection, so nothing it acknowledges is stored twice."""
    store = EmbeddingStore(tmp_path, "m", 4)
    store.insert(make_rows(["a", "b"]))
    writer = StoreWriter(store, VectorIndex(4))
    assert writer.write(make_rows(["a", "c"])).duplicates == ("a",)
    EmbeddingStore(tmp_path, "m", 4).insert(make_rows(["x", "y"]))   # another process
    result = writer.write(make_rows(["x", "y", "z"]))
    writer.close()
    assert result.inserted == ("z",) and result.duplicates == ("x", "y")
    assert sorted(store.read(with_vectors=False).column("id").to_pylist()) == [
        "a", "b", "c", "x", "y", "z"]


def test_ids_the_caller_read_are_used_until_the_table_moves_past_their_version(tmp_path):
    """A writer handed the stored ids (read while opening the index) does not read them
    again; once the table's version moves past theirs it reads what was committed since,
    and only that."""
    store = EmbeddingStore(tmp_path, "m", 4)
    store.insert(make_rows(["a"]))
    handed = StoredIds(IdPositions(pa.array(["a", "only-in-what-was-read"])), store.version)
    writer = StoreWriter(store, VectorIndex(4), stored_ids=handed)
    result = writer.write(make_rows(["only-in-what-was-read", "b"]))
    assert result.duplicates == ("only-in-what-was-read",) and result.inserted == ("b",)
    before = store.version
    EmbeddingStore(tmp_path, "m", 4).insert(make_rows(["c"]))        # another process
    stale = StoredIds(IdPositions(pa.array(["a", "b", "only-in-what-was-read"])), before)
    writer2 = StoreWriter(store, VectorIndex(4), stored_ids=stale)
    result = writer2.write(make_rows(["only-in-what-was-read", "c", "d"]))
    writer.close()
    writer2.close()
    # "c" was committed after the handed version: read; the handed ids were not re-read
    assert result.inserted == ("d",) and result.duplicates == ("only-in-what-was-read", "c")


def test_a_commit_is_one_append_of_only_new_rows(tmp_path):
    """Duplicates never reach the table: each commit adds exactly one version."""
    store = EmbeddingStore(tmp_path, "m", 4)
    writer = StoreWriter(store, VectorIndex(4), optimize_every=0)
    first = writer.write(make_rows([f"r{i}" for i in range(50)]))
    again = writer.write(make_rows([f"r{i}" for i in range(60)]))
    writer.close()
    assert again.version == first.version + 1
    assert len(again.inserted) == 10 and len(again.duplicates) == 50
    assert store.count() == 60


@pytest.mark.parametrize("error, code, words", [
    (OSError(errno.ENOSPC, "No space left on device"), "RESOURCE_EXHAUSTED",
     "data directory full"),
    (RuntimeError("LanceError(IO): Generic LocalFileSystem error: Unable to write "
                  "/srv/envad/lancedb/x.lance: No space left on device (os error 28)"),
     "RESOURCE_EXHAUSTED", "data directory full"),
    (OSError(errno.EROFS, "Read-only file system"), "FAILED_PRECONDITION", "read-only"),
    (RuntimeError("LanceError(IO): /srv/envad/x: Read-only file system (os error 30)"),
     "FAILED_PRECONDITION", "read-only"),
])
def test_a_full_or_read_only_disk_is_told_apart_without_the_servers_paths(error, code, words):
    fault = storage_fault(error)
    assert fault is not None and fault.code == code and words in str(fault)
    assert "/srv" not in str(fault)


def test_other_errors_are_no_storage_fault():
    assert storage_fault(RuntimeError("schema mismatch: vector has 8 dims")) is None
    assert storage_fault(OSError(errno.EIO, "Input/output error")) is None


def test_a_rows_reason_keeps_its_words_and_loses_the_servers_paths():
    text = ("LanceError(IO): Unable to write /srv/envad/data/lancedb/m.lance/data/x.lance: "
            "vectors have 7 dims")
    assert without_paths(text) == "LanceError(IO): Unable to write <path>: vectors have 7 dims"
    assert len(without_paths("x" * 500)) == 200
