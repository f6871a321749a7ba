"""A manifest of stored rows: a Parquet file with `id` and `uri` columns (and env,
label, split, timestamp, event when present), such as `envad export-embeddings
--without-vectors` writes. Used to re-embed an archive with a new encoder under the same
ids (the retraining job), without going back to the original archive's index."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timezone
from pathlib import Path

import pyarrow.parquet as pq

from envad.client.sources.base import Source, SourceItem, register_source
from envad.errors import InvalidInput

REQUIRED_COLUMNS = ("id", "uri")
OPTIONAL_COLUMNS = ("env", "label", "split", "timestamp", "event")
BATCH_ROWS = 8192


@register_source
class ManifestSource(Source):
    """Rows of a Parquet manifest; the key and the id are the row's `id`."""

    name = "manifest"

    @classmethod
    def detect(cls, path: Path) -> bool:
        return path.is_file() and path.suffix.lower() == ".parquet"

    def __init__(self, path: str | Path, *, split: str | None = None) -> None:
        super().__init__(path, split=split)

        try:
            self._file = pq.ParquetFile(self.path)
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise InvalidInput(f"{self.path} is not a Parquet file: {exc}") from exc
        names = set(self._file.schema_arrow.names)
        missing = [c for c in REQUIRED_COLUMNS if c not in names]
        if missing:
            raise InvalidInput(f"{self.path}: manifest lacks column(s) {missing}")
        self.columns = [c for c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS if c in names]

    def count(self) -> int:
        return self._file.metadata.num_rows

    def __iter__(self) -> Iterator[SourceItem]:
        for batch in self._file.iter_batches(batch_size=BATCH_ROWS, columns=self.columns):
            for row in batch.to_pylist():
                if not row["id"] or not row["uri"]:
                    raise InvalidInput(f"{self.path}: a row has an empty id or uri")
                ts = row.get("timestamp")
                if ts is not None and ts.tzinfo is None:
                    ts = ts.replace(tzinfo=timezone.utc)
                yield SourceItem(
                    key=row["id"],
                    id=row["id"],
                    uri=row["uri"],
                    env=row.get("env") or "",
                    label=row.get("label") or "",
                    split=self._split(row.get("split")),
                    timestamp=ts,
                    event=row.get("event") or "",
                )
