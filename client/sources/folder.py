"""The envad folder format: `DIR/metadata.csv` (path, env, label, split; optional id,
timestamp, event, is_anomaly) and optionally `DIR/ad_spec.json` ({"normal_a": [...],
"normal_b": [...]}: every other label is an anomaly). PhotoDigits is written this way.

Read here with the csv module rather than through envad.training.data, so that the
client never imports the training stack (torch).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from envad.client.sources.base import (
    Source,
    SourceItem,
    parse_timestamp,
    register_source,
    resolve_uri,
)
from envad.errors import InvalidInput

REQUIRED_COLUMNS = ("path", "env", "label", "split")
_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f", ""}


@register_source
class FolderSource(Source):
    """A folder-format dataset; the key is the relative path, the id the `id` column."""

    name = "folder"

    @classmethod
    def detect(cls, path: Path) -> bool:
        return path.is_dir() and (path / "metadata.csv").is_file()

    def __init__(self, path: str | Path, *, split: str | None = None) -> None:
        super().__init__(path, split=split)
        self.metadata = self.path / "metadata.csv"
        if not self.metadata.is_file():
            raise InvalidInput(f"{self.path} has no metadata.csv (folder format)")
        self.normal_labels = self._read_ad_spec()

    def _read_ad_spec(self) -> frozenset[str] | None:
        spec_path = self.path / "ad_spec.json"
        if not spec_path.is_file():
            return None
        try:
            spec = json.loads(spec_path.read_text())
            return frozenset(str(x) for x in spec["normal_a"]) | frozenset(
                str(x) for x in spec["normal_b"]
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"{spec_path}: expected normal_a and normal_b lists") from exc

    def __iter__(self) -> Iterator[SourceItem]:
        with self.metadata.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise InvalidInput(f"{self.metadata}: missing column(s) {missing}")
            for line, row in enumerate(reader, start=2):
                yield self._item(row, f"{self.metadata}:{line}: ")

    def _item(self, row: dict[str, str], where: str) -> SourceItem:
        if not row["path"]:
            raise InvalidInput(f"{where}empty path")
        extra: dict[str, object] = {}
        anomaly = self._is_anomaly(row, where)
        if anomaly is not None:
            extra["is_anomaly"] = anomaly
        return SourceItem(
            key=row["path"],
            uri=resolve_uri(self.path, row["path"]),
            id=(row.get("id") or "").strip(),
            env=row["env"],
            label=row["label"],
            split=self._split(row["split"]),
            timestamp=parse_timestamp(row.get("timestamp"), where),
            event=(row.get("event") or "").strip(),
            extra=extra,
        )

    def _is_anomaly(self, row: dict[str, str], where: str) -> bool | None:
        value = row.get("is_anomaly")
        if value is not None:
            text = value.strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE and text:
                return False
            if text:
                raise InvalidInput(f"{where}is_anomaly must be 0/1/true/false, got {value!r}")
        if self.normal_labels is not None:
            return row["label"] not in self.normal_labels
        return None
