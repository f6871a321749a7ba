"""Exact re-ranking of a coded index's candidates against the store's vectors.

A `RERANKED` index (ann.py) holds 4-bit codes, about 256 bytes a 512-d row, and the
stable row id of the store row at each of its positions (8 bytes a row). A
search asks the codes for `ann.RERANK_FACTOR` times the neighbours wanted, reads those
candidates' vectors from the store by row id (one read for every query of the call) and
orders them by their exact distances (`exact_order`): the neighbours and distances a
caller gets are those of the stored vectors, as with a flat index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import pyarrow as pa


class StoredVectors(Protocol):
    """What a re-ranking index reads from the store (store.EmbeddingStore)."""

    def vectors_by_row_id(self, row_ids: np.ndarray) -> np.ndarray: ...

    def row_ids_of(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray: ...


def exact_order(queries: np.ndarray, positions: np.ndarray,
                read: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each query's candidates sorted by their exact squared L2 distance.

    `positions` [q, c] are the candidates (-1: none); `read` gives the vectors at
    sorted distinct positions, called once for every query. Returns the distances and
    positions in that order; missing candidates stay last, at infinity.
    """
    distinct = np.unique(positions[positions >= 0])
    vectors = read(distinct)
    where = np.searchsorted(distinct, positions)
    distances = np.full(positions.shape, np.inf, dtype=np.float32)
    for q, query in enumerate(queries):
        found = positions[q] >= 0
        difference = vectors[where[q, found]] - query
        distances[q, found] = np.einsum("ij,ij->i", difference, difference)
    order = np.argsort(distances, axis=1, kind="stable")
    return (np.take_along_axis(distances, order, axis=1),
            np.take_along_axis(positions, order, axis=1))
