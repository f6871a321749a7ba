"""A plain tree of image files: the first folder level below the root is the
environment (one folder per camera), the relative path is the key, and the id is the
sha256 of the bytes (computed when the image is read)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from envad.client.sources.base import IMAGE_SUFFIXES, Source, SourceItem, register_source
from envad.errors import InvalidInput


@register_source
class ImageTreeSource(Source):
    """Every image file under a folder, walked in sorted order; hidden entries skipped."""

    name = "image-tree"

    @classmethod
    def detect(cls, path: Path) -> bool:
        return path.is_dir()

    def __init__(self, path: str | Path, *, split: str | None = None) -> None:
        super().__init__(path, split=split)
        if not self.path.is_dir():
            raise InvalidInput(f"{self.path} is not a folder")
        if next(iter(self), None) is None:
            raise InvalidInput(
                f"{self.path} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in it "
                "or its sub-folders")

    def __iter__(self) -> Iterator[SourceItem]:
        root = self.path.resolve()
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith(".") or Path(name).suffix.lower() not in IMAGE_SUFFIXES:
                    continue
                full = Path(dirpath) / name
                rel = full.relative_to(root)
                yield SourceItem(
                    key=rel.as_posix(),
                    uri=str(full),
                    env=rel.parts[0] if len(rel.parts) > 1 else "",
                    split=self._split(None),
                )
