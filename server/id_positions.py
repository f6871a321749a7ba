"""Stored ids and their positions, in Arrow and numpy instead of Python objects.

The index mirror needs each stored id's position and the writer needs to know whether an
id is stored. A Python dict or set of a million ids holds a million string objects
(about 0.1-0.2 GB, more for long ids). `IdPositions` keeps the ids as one Arrow string
array in position order, plus their 64-bit hashes sorted with the (32-bit) position of
each: 12 bytes a row beside the id's own bytes. Lookups are exact: a hash match is
confirmed by comparing the id stored at that position. Ids appended since the last merge sit in a
small dict and are merged into the sorted arrays once they are many (geometric, so
merging costs O(n log n) in all).

Hashes come from Python's `hash`, seeded per process: they are never saved.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: ids appended since the last merge are merged once they reach this many ...
MERGE_MIN = 65_536
#: ... and this share of the merged ones
MERGE_SHARE = 0.125
#: ids hashed at a time when many are (bounds the transient Python strings)
HASH_CHUNK = 65_536
#: the type of a held position, and so the most ids one IdPositions holds
POSITION_TYPE = np.uint32
MAX_IDS = int(np.iinfo(POSITION_TYPE).max) + 1


def id_hash(row_id: str) -> int:
    """The 64-bit hash an id is sorted by (Python's, seeded per process)."""
    return hash(row_id)


def hashes_of(ids: Sequence[str] | pa.Array | pa.ChunkedArray) -> np.ndarray:
    """`id_hash` of each id, as int64."""
    if isinstance(ids, pa.Array | pa.ChunkedArray):
        parts = [hashes_of(ids.slice(start, HASH_CHUNK).to_pylist())
                 for start in range(0, len(ids), HASH_CHUNK)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return np.fromiter((id_hash(i) for i in ids), dtype=np.int64, count=len(ids))


class GrowingArray:
    """A numpy array appended to at amortised constant cost (its buffer doubles)."""

    def __init__(self, dtype: type) -> None:
        self._values: np.ndarray = np.zeros(1024, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, values: np.ndarray) -> None:
        end = self._size + len(values)
        if end > len(self._values):
            grown = np.zeros(max(end, 2 * len(self._values)), dtype=self._values.dtype)
            grown[:self._size] = self._values[:self._size]
            self._values = grown
        self._values[self._size:end] = values
        self._size = end

    def view(self) -> np.ndarray:
        """The values appended so far (a view: valid until the next `extend`)."""
        return self._values[:self._size]


class StringColumn:
    """A growing Arrow string column (chunks merged as they pile up)."""

    def __init__(self) -> None:
        self._chunks: list[pa.Array] = []

    def copy(self) -> StringColumn:
        """A column that grows apart from this one (the Arrow chunks are immutable)."""
        twin = StringColumn()
        twin._chunks = list(self._chunks)
        return twin

    def extend(self, values: pa.Array) -> None:
        self._chunks.append(values.cast(pa.string()).fill_null(""))
        if len(self._chunks) > 64:
            self._chunks = [pa.concat_arrays(self._chunks)]

    def array(self) -> pa.Array:
        """Every value, as one Arrow array."""
        if not self._chunks:
            return pa.array([], type=pa.string())
        if len(self._chunks) > 1:
            self._chunks = [pa.concat_arrays(self._chunks)]
        return self._chunks[0]

    def at(self, positions: np.ndarray | Sequence[int]) -> list[str]:
        """The values at `positions`, taken from each chunk they fall in: no chunk is
        copied, so a lookup after an append costs the same in a column of any length."""
        positions = np.asarray(positions, dtype=np.int64)
        if len(positions) == 0:
            return []
        if len(self._chunks) == 1:
            return self._chunks[0].take(pa.array(positions)).to_pylist()
        starts = np.cumsum([0] + [len(chunk) for chunk in self._chunks])
        chunk_of = np.searchsorted(starts, positions, side="right") - 1
        values: list = [None] * len(positions)
        for chunk in np.unique(chunk_of).tolist():
            where = np.flatnonzero(chunk_of == chunk)
            taken = self._chunks[chunk].take(pa.array(positions[where] - starts[chunk]))
            for i, value in zip(where.tolist(), taken.to_pylist(), strict=True):
                values[i] = value
        return values


class IdPositions:
    """Distinct ids at positions 0, 1, 2, ... (the order they were appended)."""

    def __init__(self, ids: pa.Array | pa.ChunkedArray | None = None) -> None:
        self._ids = StringColumn()
        self._count = 0
        self._sorted_hashes = np.zeros(0, np.int64)
        self._sorted_positions = np.zeros(0, POSITION_TYPE)
        self._recent: dict[str, int] = {}
        if ids is not None:
            self.append(ids)

    def __len__(self) -> int:
        return self._count

    def __contains__(self, row_id: str) -> bool:
        return self.position(row_id) >= 0

    def position(self, row_id: str) -> int:
        """The id's position, -1 when it is not held."""
        recent = self._recent.get(row_id)
        if recent is not None:
            return recent
        h = id_hash(row_id)
        first = int(np.searchsorted(self._sorted_hashes, h, side="left"))
        end = int(np.searchsorted(self._sorted_hashes, h, side="right"))
        candidates = self._sorted_positions[first:end]     # the ids of hash h: one read
        for candidate, stored in zip(candidates.tolist(), self._ids.at(candidates),
                                     strict=True):
            if stored == row_id:
                return candidate
        return -1

    def positions(self, ids: Sequence[str]) -> np.ndarray:
        """Position of each id (int64), -1 where it is not held."""
        out = np.full(len(ids), -1, dtype=np.int64)
        if not len(ids) or not self._count:
            return out
        hashes = hashes_of(ids)
        found = np.searchsorted(self._sorted_hashes, hashes)
        inside = found < len(self._sorted_hashes)
        match = np.zeros(len(ids), dtype=bool)
        match[inside] = self._sorted_hashes[found[inside]] == hashes[inside]
        where = np.flatnonzero(match)
        if len(where):
            candidates = self._sorted_positions[found[where]]
            stored = self._ids.at(candidates)
            for j, got, position in zip(where.tolist(), stored, candidates.tolist(),
                                        strict=True):
                # a mismatch is another id with the same hash: look along its run
                out[j] = position if got == ids[j] else self.position(ids[j])
        for j, row_id in enumerate(ids):
            if out[j] < 0 and row_id in self._recent:
                out[j] = self._recent[row_id]
        return out

    def append(self, ids: pa.Array | pa.ChunkedArray | Sequence[str]) -> None:
        """Give ids not held yet the next positions (the caller makes sure they are new
        and distinct)."""
        array = ids if isinstance(ids, pa.Array | pa.ChunkedArray) else pa.array(
            list(ids), pa.string())
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        array = array.cast(pa.string()).fill_null("")
        if not len(array):
            return
        if self._count + len(array) > MAX_IDS:
            raise OverflowError(f"one index holds at most {MAX_IDS:,} ids")
        start = self._count
        self._ids.extend(array)
        self._count += len(array)
        if len(array) >= max(MERGE_MIN, len(self._recent)):
            self._merge(hashes_of(array), np.arange(start, self._count, dtype=POSITION_TYPE))
            return
        self._recent.update(zip(array.to_pylist(), range(start, self._count), strict=True))
        if len(self._recent) >= max(MERGE_MIN, MERGE_SHARE * len(self._sorted_hashes)):
            self._merge_recent()

    def append_new(self, ids: pa.Array | pa.ChunkedArray) -> int:
        """Append the ids not held yet, each once (rows read again after a compaction or
        a relabel rewrote them are held already); returns how many were new."""
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        ids = ids.cast(pa.string()).fill_null("")
        if not len(ids):
            return 0
        fresh = self.positions(ids.to_pylist()) < 0
        if not fresh.any():
            return 0
        new = pc.unique(ids.filter(pa.array(fresh)))
        self.append(new)
        return len(new)

    def copy(self) -> IdPositions:
        """The same ids at the same positions, growing apart from here on: no id is hashed
        again (the sorted arrays are shared; a merge replaces them, never writes into them)."""
        twin = IdPositions()
        twin._ids = self._ids.copy()
        twin._count = self._count
        twin._sorted_hashes, twin._sorted_positions = self._sorted_hashes, self._sorted_positions
        twin._recent = dict(self._recent)
        return twin

    def array(self) -> pa.Array:
        """Every id, in position order."""
        return self._ids.array()

    def at(self, positions: np.ndarray) -> list[str]:
        return self._ids.at(positions)

    def _merge_recent(self) -> None:
        ids = list(self._recent)
        positions = np.fromiter(self._recent.values(), dtype=POSITION_TYPE, count=len(ids))
        self._recent = {}
        self._merge(hashes_of(ids), positions)

    def _merge(self, hashes: np.ndarray, positions: np.ndarray) -> None:
        all_hashes = np.concatenate([self._sorted_hashes, hashes])
        order = np.argsort(all_hashes, kind="stable")
        self._sorted_hashes = all_hashes[order]
        self._sorted_positions = np.concatenate([self._sorted_positions, positions])[order]
        # copies share these arrays: nothing may write into them
        self._sorted_hashes.flags.writeable = self._sorted_positions.flags.writeable = False
