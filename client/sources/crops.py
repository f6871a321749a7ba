"""Detector boxes as items of their own: a `CropItem` reads its image and cuts out one
MegaDetector box, so an animal that fills a tenth of the frame is scored on its own
pixels rather than lost among the background's (`envad backfill --crops`)."""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from envad.client.sources.base import SourceItem, read_uri
from envad.errors import InvalidInput

MIN_CROP_PX = 2


@dataclass(frozen=True)
class CropItem(SourceItem):
    """One detection of an image; `bbox` is MegaDetector's [x, y, width, height] in
    fractions of the image. The bytes are the crop, as PNG."""

    bbox: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0)

    def read_bytes(self) -> bytes:
        return crop_bytes(read_uri(self.uri), self.bbox)


def crop_bytes(data: bytes, bbox: tuple[float, float, float, float]) -> bytes:
    """The part of an encoded image inside `bbox`, as PNG (OSError when unreadable, so a
    bad file fails its item like any unreadable image)."""
    try:
        with Image.open(io.BytesIO(data)) as opened:
            img = ImageOps.exif_transpose(opened) or opened
            width, height = img.size
            x, y, w, h = bbox
            left, top = int(max(0.0, x) * width), int(max(0.0, y) * height)
            right = min(width, max(left + MIN_CROP_PX, round((x + w) * width)))
            bottom = min(height, max(top + MIN_CROP_PX, round((y + h) * height)))
            crop = img.convert("RGB").crop((left, top, right, bottom))
            out = io.BytesIO()
            crop.save(out, "PNG")
            return out.getvalue()
    except (UnidentifiedImageError, Image.DecompressionBombError, ValueError) as exc:
        raise OSError(f"cannot crop: {exc}") from exc


def parse_bbox(value: object, where: str) -> tuple[float, float, float, float]:
    """A MegaDetector box [x, y, width, height] with values in [0, 1]."""
    try:
        x, y, w, h = (float(v) for v in value)  # type: ignore[attr-defined]
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{where}: bbox must be [x, y, width, height], got {value!r}") from exc
    if not (0 <= x <= 1 and 0 <= y <= 1 and 0 < w <= 1 and 0 < h <= 1):
        raise InvalidInput(f"{where}: bbox values must be fractions of the image, got {value!r}")
    return (x, y, w, h)
