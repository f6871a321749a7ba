"""The compressed neighbour index (`ivf-sq4`: 4-bit codes, candidates re-ranked against
the store's vectors) of a real server on a generated 200,000-row LanceDB store
(benchmarks/scale.py's clustered 512-d rows): recall@10 of Search against exact search
on held-out queries, a row appended after the build found at once, and a restart that
loads the saved index instead of building it again.

The appended row is one more row of the same generator, handed to the server's own
writer (what Ingest does with an image's embedding): the tiny test encoder's embeddings
lie outside the clusters the codes were trained on (docs/neighbour-index.md)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from benchmarks.scale import (
    DIM,
    MODEL_ID,
    K,
    exact_neighbours,
    held_out_queries,
    vectors,
    write_store,
)
from envad.server.ann import RERANKED, recall_at_k
from envad.server.store import Row
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import InProcessServer
from tiny_encoder import build_tiny_encoder

ROWS = 200_000
#: the Done-when's floor (IVF's probes are calibrated to 0.97 of an all-lists search,
#: and the stored vectors rank the codes' candidates: docs/neighbour-index.md)
RECALL_FLOOR = 0.95


def _search_ids(stub, queries: np.ndarray) -> list[list[str]]:
    """Search's neighbour ids of each query vector (k = K), through gRPC."""
    return [[n.id for n in stub.Search(pb.SearchRequest(
        vector=pb.Vector(values=q.tolist()), k=K), timeout=30).neighbors] for q in queries]


def _row_numbers(ids: list[list[str]]) -> np.ndarray:
    """Generated row ids `rN` as N; any other id (an ingested row) as -1."""
    return np.asarray([[int(i[1:]) if i[1:].isdigit() else -1 for i in row] for row in ids])


@pytest.mark.slow
def test_compressed_index_at_200k_rows(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="envad")
    write_store(tmp_path / "data" / "lancedb", ROWS)
    build_tiny_encoder(tmp_path / "models" / "scale.onnx", model_id=MODEL_ID, dim=DIM)
    server = InProcessServer(tmp_path / "data", tmp_path / "models", {
        "ENVAD_IVF_THRESHOLD": str(ROWS), "ENVAD_COMPRESSED_THRESHOLD": str(ROWS)}).start()
    try:
        assert f"built from the store: {ROWS} rows ({RERANKED})" in caplog.text
        stub = pb_grpc.AnomalyServiceStub(server.channel())
        queries = held_out_queries(ROWS)
        found = _search_ids(stub, queries)
        recall = recall_at_k(_row_numbers(found), exact_neighbours(ROWS, queries, None))
        print(f"recall@10 of {RERANKED} at {ROWS} rows: {recall:.3f}")
        assert recall >= RECALL_FLOOR
        assert server.running is not None
        space = server.running.engine.require_space()
        trained = space.index._index
        new = vectors(1, start=ROWS + 20_000_000)[0]         # appended after the build
        assert not space.writer.write([Row(id="new", vector=new, env="cam-1",
                                           split="train")]).failed
        assert _search_ids(stub, new[None, :])[0][0] == "new"
        assert space.index._index is trained                 # encoded, not rebuilt
        before = _search_ids(stub, queries)
        caplog.clear()
        server.restart()
        assert "built from the store" not in caplog.text
        assert f"loaded: {ROWS + 1} rows ({RERANKED})" in caplog.text
        stub = pb_grpc.AnomalyServiceStub(server.channel())
        assert _search_ids(stub, queries) == before
        assert _search_ids(stub, new[None, :])[0][0] == "new"
    finally:
        server.stop()
