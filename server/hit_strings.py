"""The URI and content hash of an index's hits: held beside the index, or read with them.

A search names its neighbours' URIs, and `exclude_self` compares its candidates' content
hashes with the query's. An uncompressed index (flat, ivf) holds every row's URI and
sha256 as Arrow strings (`HeldStrings`): a few dozen to a few hundred bytes a row, beside
the 2 KB of its float32 vector. A re-ranked index reads its candidates' vectors from the
store at every search (rerank.py); their URIs and hashes come with that read
(`ReadStrings`), so it holds none: at ten million rows with 80-character URIs and
sha256 hashes that is about 1.5 GB less on every replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from envad.server.id_positions import StringColumn

#: the columns a re-ranked search reads for its candidates
READ_COLUMNS = ("vector", "uri", "sha256")


class HitStrings(Protocol):
    """The URI and the sha256 of the rows at index positions."""

    def uris_at(self, positions: np.ndarray) -> list[str]: ...

    def hashes_at(self, positions: np.ndarray) -> list[str]: ...


@dataclass(frozen=True)
class HeldStrings:
    """Every indexed row's URI and sha256, in position order (grown by the index)."""

    uris: StringColumn
    hashes: StringColumn

    @staticmethod
    def empty() -> HeldStrings:
        return HeldStrings(StringColumn(), StringColumn())

    def extend(self, rows: pa.Table) -> None:
        """Append the URIs and hashes of rows just given the next positions (a table
        without a sha256 column has none: empty strings)."""
        self.uris.extend(rows.column("uri").combine_chunks())
        self.hashes.extend(rows.column("sha256").combine_chunks()
                           if "sha256" in rows.column_names
                           else pa.array([""] * rows.num_rows, pa.string()))

    def uris_at(self, positions: np.ndarray) -> list[str]:
        return self.uris.at(positions)

    def hashes_at(self, positions: np.ndarray) -> list[str]:
        return self.hashes.at(positions)


@dataclass(frozen=True)
class ReadStrings:
    """The URIs and hashes of the rows at the sorted distinct `positions`, read from the
    store with their vectors (`rows`: READ_COLUMNS, row i at positions[i])."""

    positions: np.ndarray
    uris: list[str]
    hashes: list[str]

    @staticmethod
    def of(positions: np.ndarray, rows: pa.Table) -> ReadStrings:
        return ReadStrings(positions,
                           rows.column("uri").fill_null("").to_pylist(),
                           rows.column("sha256").fill_null("").to_pylist())

    def uris_at(self, positions: np.ndarray) -> list[str]:
        return [self.uris[i] for i in self._where(positions)]

    def hashes_at(self, positions: np.ndarray) -> list[str]:
        return [self.hashes[i] for i in self._where(positions)]

    def _where(self, positions: np.ndarray) -> list[int]:
        positions = np.asarray(positions, dtype=np.int64)
        if len(positions) == 0:
            return []
        if len(self.positions) == 0:
            raise KeyError("positions that were not read with the candidates")
        where = np.searchsorted(self.positions, positions).clip(0, len(self.positions) - 1)
        if not np.array_equal(self.positions[where], positions):
            raise KeyError("positions that were not read with the candidates")
        return where.tolist()
