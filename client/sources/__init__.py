"""Archive sources for backfill: one module per kind, behind one registry.

`open_source(path)` picks the kind by looking at the path (Camtrap DP package, folder
format, COCO Camera Traps JSON, MegaDetector JSON, Parquet manifest, else a plain image
tree) unless `kind` names one of `SOURCES`.
"""

from __future__ import annotations

from pathlib import Path

from envad.client.sources import (
    camtrap_dp,
    coco_camera_traps,
    folder,
    image_tree,
    manifest,
    megadetector,
)
from envad.client.sources.base import SOURCES, Source, SourceItem, read_uri, register_source
from envad.errors import InvalidInput

#: Auto-detection order: most specific first; the image tree accepts any folder.
DETECTION_ORDER = (
    camtrap_dp.CamtrapDPSource,
    folder.FolderSource,
    coco_camera_traps.CocoCameraTrapsSource,
    megadetector.MegaDetectorSource,
    manifest.ManifestSource,
    image_tree.ImageTreeSource,
)

__all__ = ["SOURCES", "Source", "SourceItem", "detect_kind", "open_source", "read_uri",
           "register_source"]


def detect_kind(path: str | Path) -> str:
    """The registry name of the source kind that `path` looks like."""
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"source {path} does not exist")
    for cls in DETECTION_ORDER:
        if cls.detect(path):
            return cls.name
    raise InvalidInput(
        f"cannot tell what kind of source {path} is; pass one of {sorted(SOURCES)}"
    )


def open_source(path: str | Path, kind: str = "auto", **options) -> Source:
    """Open an archive. `options` go to the source class (unknown ones are an error)."""
    name = detect_kind(path) if kind == "auto" else kind
    if name not in SOURCES:
        raise InvalidInput(f"unknown source kind {name!r}; known: {sorted(SOURCES)}")
    try:
        return SOURCES[name](path, **options)
    except TypeError as exc:
        raise InvalidInput(f"source {name!r} does not take these options: {exc}") from exc
