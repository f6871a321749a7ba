"""Exact re-ranking of a coded index's candidates against the store's vectors.

A `RERANKED` index (ann.py) holds 4-bit codes, about 256 bytes a 512-d row, and the
stable row id of the store row at each of its positions (8 bytes a row). A
search asks the codes for `ann.RERANK_FACTOR` times the neighbours wanted, reads those
candidates' vectors from the store by row id (one read for every query of the call) and
orders them by their exact distances (`exact_order`): the neighbours and distances a
caller gets are those of the stored vectors, as with a flat index. The same read brings
the candidates' URIs and content hashes (hit_strings.py), so the index holds none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa


class StoredVectors(Protocol):
    """What a re-ranking index reads from the store (store.EmbeddingStore)."""

    def vectors_by_row_id(self, row_ids: np.ndarray) -> np.ndarray: ...

    def rows_by_row_id(self, row_ids: np.ndarray, columns: Sequence[str]) -> pa.Table: ...

    def row_ids_of(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray: ...


def exact_order(queries: np.ndarray, positions: np.ndarray,
                read: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each query's candidates sorted by their exact squared L2 distance.

    `positions` [q, c] are the candidates (-1: none); `read` gives the vectors at
    sorted distinct positions, called once for every query. Returns the distances and
    positions in that order; missing candidates stay last, at infinity.
    """
    distinct = candidate_positions(positions)
    return order_by_vectors(queries, positions, distinct, read(distinct))


def candidate_positions(positions: np.ndarray) -> np.ndarray:
    """The sorted distinct positions among candidates `positions` [q, c] (-1: none)."""
    return np.unique(positions[positions >= 0])


def order_by_vectors(queries: np.ndarray, positions: np.ndarray, distinct: np.ndarray,
                     vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`exact_order` with the `vectors` of the `distinct` candidate positions read."""
    where = np.searchsorted(distinct, positions)
    distances = np.full(positions.shape, np.inf, dtype=np.float32)
    for q, query in enumerate(queries):
        found = positions[q] >= 0
        difference = vectors[where[q, found]] - query
        distances[q, found] = np.einsum("ij,ij->i", difference, difference)
    order = np.argsort(distances, axis=1, kind="stable")
    return (np.take_along_axis(distances, order, axis=1),
            np.take_along_axis(positions, order, axis=1))
