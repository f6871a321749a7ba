"""RowBatch bytes encoded from Arrow columns equal the message built field by field."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from google.protobuf import timestamp_pb2 as pb_timestamp

from envad.server import row_encoding
from envad.server.row_encoding import arrow_chunk_bytes, row_batch_bytes, rows_chunk_bytes
from envad.server.store import EmbeddingStore, Row, rows_table
from envad.v1 import envad_pb2 as pb

UTC = dt.timezone.utc


def reference(batch) -> pb.RowBatch:
    """The RowBatch built one Row message and one field at a time."""
    data = batch.to_pydict()
    out = pb.RowBatch()
    for i, row_id in enumerate(data["id"]):
        row = out.rows.add(id=row_id, env=data["env"][i] or "", label=data["label"][i] or "",
                           split=data["split"][i] or "", uri=data["uri"][i] or "",
                           sha256=data["sha256"][i] or "", model_id=data["model_id"][i] or "",
                           event=data["event"][i] or "")
        for name in ("timestamp", "ingested_at"):
            if data[name][i] is not None:
                getattr(row, name).FromDatetime(data[name][i])
        if "vector" in data:
            row.vector.extend(data["vector"][i])
    return out


def sample_rows() -> list[Row]:
    rng = np.random.default_rng(0)
    stamps = [None, dt.datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC),
              dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(1, 1, 1, tzinfo=UTC),
              dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]
    return [Row(id=f"row-{i}-é✓", vector=rng.standard_normal(300).astype(np.float32),
                env="" if i % 2 else f"cam {i}", label="ø" * (i * 40), split="train",
                timestamp=stamps[i % len(stamps)], uri="" if i % 3 else f"file:///{i}.jpg",
                sha256=f"{i:064x}", event=f"burst {i // 5}" if i % 4 else "")
            for i in range(25)]


@pytest.fixture(params=["per value", "as columns"])
def encoding_path(request, monkeypatch):
    """Every test below twice: each distinct category or time encoded in Python, and
    every one encoded by column operations (as for a field of many distinct values)."""
    if request.param == "as columns":
        monkeypatch.setattr(row_encoding, "FEW_VALUES", 0)
    return request.param


@pytest.mark.parametrize("with_vectors", [True, False])
def test_encoded_rows_equal_the_field_by_field_message(with_vectors, encoding_path):
    table = rows_table(sample_rows(), "model-x", 300)
    if not with_vectors:
        table = table.drop_columns(["vector"])
    batch = table.to_batches()[0]
    expected = reference(batch)
    assert row_batch_bytes(batch) == expected.SerializeToString()
    assert pb.RowBatch.FromString(row_batch_bytes(batch)) == expected


def test_export_chunks_of_a_real_store_hold_its_rows(tmp_path, encoding_path):
    store = EmbeddingStore(tmp_path / "lancedb", "model-x", 300)
    store.append(store.to_arrow(sample_rows()))
    provenance = pb.Provenance(model_id="model-x", table_version=store.version)
    batches = list(store.iter_batches(batch_size=10))
    assert [b.num_rows for b in batches] == [10, 10, 5]
    for batch in batches:
        chunk = pb.ExportChunk.FromString(rows_chunk_bytes(batch, provenance.SerializeToString()))
        assert chunk.rows == reference(batch) and chunk.provenance == provenance
        arrow = pb.ExportChunk.FromString(arrow_chunk_bytes(b"ipc", provenance.SerializeToString()))
        assert arrow.arrow_ipc == b"ipc" and arrow.provenance == provenance
    stored = store.read()
    exported = [row for batch in batches for row in reference(batch).rows]
    assert [r.id for r in exported] == stored.column("id").to_pylist()
    assert np.array_equal(np.array([r.vector for r in exported], np.float32),
                          np.stack(stored.column("vector").to_numpy(zero_copy_only=False)))


def test_columns_empty_in_every_row_are_left_out_as_the_message_leaves_them(encoding_path):
    rows = sample_rows()
    for row in rows:
        row.uri, row.label, row.timestamp, row.event = "", "", None, ""
    batch = rows_table(rows, "model-x", 300).to_batches()[0]
    assert row_batch_bytes(batch) == reference(batch).SerializeToString()


def test_columns_of_one_value_or_none_encode_as_the_message_does(encoding_path):
    """One camera and split, no label or capture time, one ingestion time: each
    distinct value is encoded once and repeated, or nothing is written."""
    rng = np.random.default_rng(1)
    rows = [Row(id=f"r{i}", vector=rng.standard_normal(8).astype(np.float32), env="cam-1",
                label="", split="train", timestamp=None, uri=f"file:///{i}.jpg",
                sha256=f"{i:064x}") for i in range(40)]
    batch = rows_table(rows, "model-x", 8).to_batches()[0]
    assert row_batch_bytes(batch) == reference(batch).SerializeToString()


@pytest.mark.parametrize("values", [
    [0, 1, 127],                                   # one byte each
    [128, 300, 16383],                             # two bytes each
    [0, 127, 128, 16384, 2**35, 2**63 - 1],        # every length from one to nine bytes
    [-1, -(2**63), 5],                             # negatives: ten bytes, two's complement
])
def test_varint_columns_equal_one_varint_per_value(values):
    from envad.server.row_encoding import _key, _varint, _varints

    column = _varints(np.array(values, np.int64), _key(7)).to_pylist()
    assert column == [_key(7) + _varint(v) for v in values]
    for v in values:         # a Timestamp's seconds are an int64 field, number 1
        if v:
            assert pb_timestamp.Timestamp(seconds=v).SerializeToString() == b"\x08" + _varint(v)
    kept = np.array([i % 2 == 0 for i in range(len(values))])
    column = _varints(np.array(values, np.int64), b"", kept).to_pylist()
    assert column == [_varint(v) if keep else b"" for v, keep in zip(values, kept, strict=True)]
