"""In-memory FAISS mirror of a store table, for fast filtered kNN.

Rebuilt from LanceDB at start, extended on every write and whenever another process adds
rows to the table. Each row gets a dense integer position; metadata (id, env, split,
label, uri) is kept in arrays beside the index so structured filters become a FAISS
id selector. Flat (exact) L2 search below `ivf_threshold` rows; an IVF index above it.
"""

from __future__ import annotations

import threading

import faiss
import numpy as np
import pyarrow as pa

from envad.errors import InvalidInput
from envad.records import Neighbor, RowFilter
from envad.server.store import vectors_of

DEFAULT_IVF_THRESHOLD = 200_000


def filter_mask(row_filter: RowFilter, env: np.ndarray, split: np.ndarray,
                label: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows (given as metadata arrays) that `row_filter` matches."""
    keep = np.ones(len(env), dtype=bool)
    for values, column in ((row_filter.envs, env), (row_filter.splits, split),
                           (row_filter.labels, label)):
        if values:
            keep &= np.isin(column, np.asarray(values, dtype=object))
    return keep


class VectorIndex:
    """FAISS index + metadata arrays; thread-safe add and search."""

    def __init__(self, dim: int, *, ivf_threshold: int = DEFAULT_IVF_THRESHOLD):
        self.dim = dim
        self.ivf_threshold = ivf_threshold
        self._lock = threading.RLock()
        self._index: faiss.Index = faiss.IndexFlatL2(dim)
        self._ids: list[str] = []
        self._positions: dict[str, int] = {}
        self._meta: dict[str, list[str]] = {name: [] for name in ("env", "label", "split", "uri")}
        self._arrays: dict[str, np.ndarray] | None = None
        self.kind = "flat"

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, row_id: str) -> bool:
        return row_id in self._positions

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._positions)

    def add_table(self, table: pa.Table) -> int:
        """Add the rows of an Arrow table (store schema) not yet indexed; returns the count."""
        if table.num_rows == 0:
            return 0
        ids = table.column("id").to_pylist()
        with self._lock:
            fresh = [i for i, row_id in enumerate(ids) if row_id not in self._positions]
            if not fresh:
                return 0
            # Deduplicate within the table itself, keeping the first occurrence.
            seen: set[str] = set()
            unique = []
            for i in fresh:
                if ids[i] not in seen:
                    seen.add(ids[i])
                    unique.append(i)
            fresh = unique
            subset = table.take(pa.array(fresh))
            vectors = vectors_of(subset)
            self._grow(len(self._ids) + len(fresh), vectors)
            self._index.add(vectors)
            for i in fresh:
                self._positions[ids[i]] = len(self._ids)
                self._ids.append(ids[i])
            for name, values in self._meta.items():
                values.extend(str(v or "") for v in subset.column(name).to_pylist())
            self._arrays = None
            return len(fresh)

    def _grow(self, total: int, new_vectors: np.ndarray) -> None:
        """Switch from flat to IVF once the table is large (retrains on all vectors)."""
        if self.kind == "flat" and total >= self.ivf_threshold:
            existing = self._index.reconstruct_n(0, self._index.ntotal)
            everything = np.vstack([existing, new_vectors]) if len(existing) else new_vectors
            nlist = int(4 * np.sqrt(total))
            quantizer = faiss.IndexFlatL2(self.dim)
            ivf = faiss.IndexIVFFlat(quantizer, self.dim, nlist)
            ivf.train(everything)
            ivf.add(existing)
            ivf.nprobe = max(8, nlist // 16)
            self._index = ivf
            self.kind = "ivf"

    def _metadata(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            self._arrays = {k: np.asarray(v, dtype=object) for k, v in self._meta.items()}
        return self._arrays

    def search(self, queries: np.ndarray, k: int,
               row_filter: RowFilter = RowFilter()) -> list[list[Neighbor]]:
        """The k nearest indexed rows (matching the filter) to each query vector."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InvalidInput(f"query vectors must have shape [n, {self.dim}], got "
                               f"{list(queries.shape)}")
        if not np.isfinite(queries).all():
            raise InvalidInput("query vectors contain NaN or infinity")
        with self._lock:
            if not self._ids or k <= 0:
                return [[] for _ in range(len(queries))]
            params = None
            if not row_filter.is_empty():
                meta = self._metadata()
                allowed = np.flatnonzero(filter_mask(row_filter, meta["env"], meta["split"],
                                                         meta["label"]))
                if len(allowed) == 0:
                    return [[] for _ in range(len(queries))]
                selector = faiss.IDSelectorBatch(allowed.astype(np.int64))
                # faiss's SWIG stubs know neither the keyword constructors nor IVF's nprobe
                params = (faiss.SearchParametersIVF(sel=selector,  # type: ignore[call-arg]
                                                    nprobe=self._index.nprobe)  # type: ignore[attr-defined]
                          if self.kind == "ivf"
                          else faiss.SearchParameters(sel=selector))  # type: ignore[call-arg]
            k_eff = min(k, len(self._ids))
            distances, positions = self._index.search(queries, k_eff, params=params)
            meta = self._metadata()
            return [
                [Neighbor(id=self._ids[p], env=meta["env"][p], label=meta["label"][p],
                     split=meta["split"][p], uri=meta["uri"][p],
                     distance=float(np.sqrt(max(d, 0.0))))
                 for d, p in zip(drow, prow, strict=True) if p >= 0]
                for drow, prow in zip(distances, positions, strict=True)
            ]

    def relabel(self, ids, label: str) -> None:
        """Set the label of indexed rows (after the store's; unknown ids are ignored)."""
        with self._lock:
            for row_id in ids:
                position = self._positions.get(row_id)
                if position is not None:
                    self._meta["label"][position] = label
            self._arrays = None
