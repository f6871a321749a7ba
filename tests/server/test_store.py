"""EmbeddingStore on a real LanceDB directory."""

from __future__ import annotations

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from envad.errors import FailedPrecondition, InvalidInput
from envad.records import RowFilter
from envad.server.store import (
    ADDED_COLUMNS,
    EmbeddingStore,
    Row,
    make_schema,
    open_table,
    rows_table,
    table_name,
    upgrade_table,
    vectors_of,
    where_clause,
)


def rows(n, start=0, dim=4):
    return [Row(id=f"r{i}", vector=np.full(dim, i, np.float32), env=f"e{i % 2}",
                split="train" if i % 3 else "val", label="a") for i in range(start, start + n)]


def test_insert_is_idempotent_by_id(tmp_path):
    store = EmbeddingStore(tmp_path, "m", 4)
    assert store.insert(rows(5)).inserted == 5
    assert store.insert(rows(5, start=3)).inserted == 3
    assert store.count() == 8


def test_id_is_primary_key_in_schema():
    field = make_schema(8).field("id")
    assert field.metadata[b"lance-schema:unenforced-primary-key"] == b"true"
    assert not field.nullable


def test_filters_and_reads(tmp_path):
    store = EmbeddingStore(tmp_path, "m", 4)
    store.insert(rows(9))
    table = store.read(RowFilter(envs=("e1",), splits=("train",)))
    assert sorted(table.column("id").to_pylist()) == ["r1", "r5", "r7"]
    assert vectors_of(table).shape == (3, 4)
    assert store.count(RowFilter(splits=("val",))) == 3
    assert store.existing_ids(["r1", "nope"]) == {"r1"}
    assert store.env_counts() == {"e0": 5, "e1": 4}
    batches = list(store.iter_batches(batch_size=4))
    assert [b.num_rows for b in batches] == [4, 4, 1]


def test_filter_values_are_quoted_not_executed(tmp_path):
    store = EmbeddingStore(tmp_path, "m", 4)
    store.insert(rows(4))
    assert store.count(RowFilter(envs=("e0' OR '1'='1",))) == 0
    with pytest.raises(InvalidInput):
        where_clause(RowFilter(envs=("bad\x00",)))


def test_one_table_per_model_and_dimension_checked(tmp_path):
    EmbeddingStore(tmp_path, "model/a", 4).insert(rows(2))
    other = EmbeddingStore(tmp_path, "model-b", 4)
    assert other.count() == 0 and table_name("model/a") == "emb_model_a"
    with pytest.raises(FailedPrecondition, match="4-d"):
        EmbeddingStore(tmp_path, "model/a", 8)


def test_refresh_sees_rows_from_another_connection(tmp_path):
    reader = EmbeddingStore(tmp_path, "m", 4)
    writer = EmbeddingStore(tmp_path, "m", 4)
    writer.insert(rows(3))
    reader.refresh()
    assert reader.count() == 3


def test_seen_version_follows_own_writes_and_refreshes_without_a_lookup(tmp_path):
    store = EmbeddingStore(tmp_path, "m", 4)
    other = EmbeddingStore(tmp_path, "m", 4)
    start = store.seen_version
    written = store.append(store.to_arrow(rows(2)))
    assert store.seen_version == written == start + 1
    assert store.insert(rows(2, start=2)).version == store.seen_version == start + 2
    store.set_label(["r0"], "b")
    assert store.seen_version == start + 3
    other.insert(rows(1, start=9))           # another process commits
    assert store.seen_version == start + 3   # not looked up until a refresh
    assert store.refresh() and store.seen_version == start + 4
    assert store.version == store.seen_version


def test_optimize_keeps_rows(tmp_path):
    store = EmbeddingStore(tmp_path, "m", 4)
    for i in range(5):
        store.insert(rows(2, start=2 * i))
    store.optimize()
    assert store.count() == 10


def test_batches_are_exact_across_fragments_and_filtered(tmp_path):
    """Export's batches are read lazily from several fragments and still hold exactly
    `batch_size` rows each (the last one shorter)."""
    store = EmbeddingStore(tmp_path, "m", 4)
    for start in range(0, 15, 3):        # five commits: five fragments of three rows
        store.insert(rows(3, start=start))
    batches = list(store.iter_batches(batch_size=4))
    assert [b.num_rows for b in batches] == [4, 4, 4, 3]
    ids = [i for b in batches for i in b.column("id").to_pylist()]
    assert sorted(ids) == sorted(f"r{i}" for i in range(15))
    filtered = list(store.iter_batches(RowFilter(envs=("e0",)), batch_size=2,
                                       with_vectors=False))
    assert sum(b.num_rows for b in filtered) == store.count(RowFilter(envs=("e0",)))
    assert "vector" not in filtered[0].schema.names


def _table_of_the_first_schema(db_dir, n: int):
    """A table as the first release wrote it (no column of ADDED_COLUMNS), with n rows."""
    first = pa.schema([f for f in make_schema(4) if f.name not in ADDED_COLUMNS])
    table = lancedb.connect(str(db_dir)).create_table(table_name("m"), schema=first)
    table.add(rows_table(rows(n), "m", 4).select(first.names))
    return table


def test_a_table_without_the_event_column_is_brought_up_to_the_schema(tmp_path):
    _table_of_the_first_schema(tmp_path, 6)
    store = EmbeddingStore(tmp_path, "m", 4)
    assert store.read(with_vectors=False).column("event").to_pylist() == [""] * 6
    assert store.count() == 6 and vectors_of(store.read()).shape == (6, 4)
    burst = [Row(id=f"b{i}", vector=np.ones(4, np.float32), env="e0", event="burst-1")
             for i in range(2)]
    assert store.insert(burst).inserted == 2
    again = EmbeddingStore(tmp_path, "m", 4)       # a restart: no second migration
    assert again.version == store.version
    events = dict(zip(*again.read(with_vectors=False, columns=("id", "event")).to_pydict()
                      .values(), strict=True))
    assert events["b0"] == events["b1"] == "burst-1" and events["r0"] == ""


def test_a_process_that_adds_the_column_second_finds_it_added(tmp_path):
    """Two processes open the old table at once: the one whose commit loses sees the
    column the other added, and goes on."""
    _table_of_the_first_schema(tmp_path, 3)
    late = lancedb.connect(str(tmp_path)).open_table(table_name("m"))
    first = open_table(lancedb.connect(str(tmp_path)), "m", 4)
    assert "event" in first.schema.names and "event" not in late.schema.names
    assert "event" in upgrade_table(late).schema.names
    assert EmbeddingStore(tmp_path, "m", 4).count() == 3



def test_synced_ids_read_only_the_fragments_committed_since(tmp_path, monkeypatch):
    store = EmbeddingStore(tmp_path, "m", 4)
    store.insert(rows(3))
    held = store.stored_ids()
    other = EmbeddingStore(tmp_path, "m", 4)             # another process's commits
    other.insert(rows(2, start=3))
    other.insert(rows(1, start=5))
    read_all = store.stored_ids
    monkeypatch.setattr(store, "stored_ids", lambda: pytest.fail("every id read again"))
    synced = store.synced_ids(held)
    assert synced.version == other.version and len(synced.ids) == 6
    assert synced.ids.positions(["r0", "r5", "r6"]).tolist()[1:] == [5, -1]
    other.set_label(["r1"], "b")                          # a relabel rewrites r1's row
    other.optimize()                                      # a compaction rewrites them all
    again = store.synced_ids(synced)
    assert again.version == other.version and len(again.ids) == 6   # none held twice
    assert store.synced_ids(again) is again               # nothing new: nothing read
    monkeypatch.setattr(store, "stored_ids", read_all)
    gone = type(held)(held.ids, version=10_000)           # a version no longer readable
    assert len(store.synced_ids(gone).ids) == 6
