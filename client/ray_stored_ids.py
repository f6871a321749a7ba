"""The ids stored in a store table, for the Ray engine's driver: read once, then kept up to
date by reading only the fragments committed since.

Before each chunk's commit the driver drops the ids already stored. Asking the table
(a filtered scan of its id column) costs a pass over every stored id for each chunk, so
a backfill slows down as the table grows: quadratic in the archive. `StoredIds` reads
the id column once at the start, then at each chunk only the fragments it has not read
yet: the driver's own commits and any other writer's (the service's writer beside it),
and fragments rewritten by a compaction (their ids are held already and are skipped).
Lookups are exact (`envad.server.id_positions.IdPositions`: the ids as one Arrow column
plus their sorted 64-bit hashes, about 16 bytes a row beside the id's own bytes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from envad.server.id_positions import IdPositions


class StoredIds:
    """The ids of a Lance dataset's rows (`refresh` reads what was committed since)."""

    def __init__(self, dataset: Any) -> None:
        from envad.server.id_positions import IdPositions  # the server's: the ray extra

        self._ids: IdPositions = IdPositions()
        self._fragments: set[int] = set()
        self.refresh(dataset)

    def __len__(self) -> int:
        return len(self._ids)

    def refresh(self, dataset: Any) -> int:
        """Read the id column of the fragments of `dataset` (a `lance.LanceDataset` at
        the version to check against) not read before; returns the new ids."""
        added = 0
        for fragment in dataset.get_fragments():
            if fragment.fragment_id in self._fragments:
                continue
            ids = fragment.to_table(columns=["id"]).column("id").combine_chunks()
            added += self.add(ids)
            self._fragments.add(fragment.fragment_id)
        return added

    def add(self, ids: pa.Array) -> int:
        """Hold the ids not held yet (each once); returns how many were new."""
        ids = ids.cast(pa.string()).fill_null("")
        if not len(ids):
            return 0
        fresh = self._ids.positions(ids.to_pylist()) < 0
        unique = pc.unique(ids.filter(pa.array(fresh))) if fresh.any() else None
        if unique is None or not len(unique):
            return 0
        self._ids.append(unique)
        return len(unique)

    def stored(self, ids: list[str]) -> set[str]:
        """The subset of `ids` held."""
        if not ids:
            return set()
        held = self._ids.positions(ids) >= 0
        return {row_id for row_id, found in zip(ids, held.tolist(), strict=True) if found}

