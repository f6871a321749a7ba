"""benchmarks.rows_export: its protobuf reference encodes a real store's rows to the bytes
the server sends, and its records render as the benchmarks page's table."""

from __future__ import annotations

import dataclasses
import json

from benchmarks.report import render
from benchmarks.rows_export import _PROVENANCE, make_rows, protobuf_rows_chunk
from benchmarks.store_write import DIM, MODEL_ID, time_writer
from envad.server.row_encoding import rows_chunk_bytes
from envad.server.store import EmbeddingStore
from envad.v1 import envad_pb2 as pb


def test_the_protobuf_reference_gives_the_servers_bytes_for_a_real_store(tmp_path):
    rows = make_rows(300)
    rows[:7] = [dataclasses.replace(r, timestamp=None, uri="", event="") for r in rows[:7]]
    time_writer(tmp_path / "lancedb", rows, 128)
    batches = list(EmbeddingStore(tmp_path / "lancedb", MODEL_ID, DIM).iter_batches())
    assert sum(b.num_rows for b in batches) == 300
    for batch in batches:
        encoded = protobuf_rows_chunk(batch, _PROVENANCE)
        assert encoded == rows_chunk_bytes(batch, _PROVENANCE)
        chunk = pb.ExportChunk.FromString(encoded)
        assert len(chunk.rows.rows) == batch.num_rows
        assert chunk.provenance.model_id == MODEL_ID
    by_id = {r.id: r for r in rows}
    parsed = pb.ExportChunk.FromString(protobuf_rows_chunk(batches[0], _PROVENANCE)).rows.rows
    for row in parsed:
        stored = by_id[row.id]
        assert list(row.vector) == stored.vector.tolist()
        assert row.HasField("timestamp") == (stored.timestamp is not None)
        assert (row.env, row.event) == (stored.env, stored.event)


def test_the_records_render_one_row_per_measurement(tmp_path):
    common = {"rows": 50_000, "dim": 512, "rounds": 3, "machine": {"cpu_count": 2}}
    path = tmp_path / "rows_export.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"benchmark": "rows_encode", **common, "envad_rows_per_s": 250_000,
         "protobuf_rows_per_s": 18_000, "ratio_envad_over_protobuf": 13.9},
        {"benchmark": "rows_export_rpc", **common, "envad_rows_per_s": 40_000,
         "protobuf_rows_per_s": 12_000, "ratio_envad_over_protobuf": 3.33}]))
    table = render(path).splitlines()
    assert table[-2] == "| encoding alone (best of 3) | 50,000 | 250,000 | 18,000 | 13.90 |"
    assert table[-1].startswith("| whole Export RPC through `envad serve` (median of 3) | "
                                "50,000 | 40,000 | 12,000 | 3.33 |")
