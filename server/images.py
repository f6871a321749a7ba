"""Decode image bytes into the RGB uint8 array an envad encoder takes.

One function, `decode_image`, used by the server for every request and by training for
evaluation-time preprocessing, so that serving and training see identical pixels.

Steps: size guards -> open (header only) -> pixel guard -> first frame -> JPEG draft
(reduced-scale DCT decode when the target is much smaller) -> EXIF orientation ->
mode conversion to RGB -> resize to size x size (bilinear, aspect ratio not kept).
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from envad.errors import InvalidInput

_FILE_OBJECT = re.compile(r"<_io\.BytesIO object at 0x[0-9a-f]+>")
# PIL's own bomb check warns/raises on its own global; we check explicitly instead.
Image.MAX_IMAGE_PIXELS = None

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_PIXELS = 120_000_000
#: Background that transparent pixels are composited onto (mid grey).
ALPHA_BACKGROUND = (128, 128, 128)


@dataclass(frozen=True)
class DecodeLimits:
    """Guards against oversized and malicious inputs."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_pixels: int = DEFAULT_MAX_PIXELS


class ImageDecodeError(InvalidInput):
    """The bytes are not an image envad can use (corrupt, unknown format, too large)."""


def decode_image(data: bytes, size: int, limits: DecodeLimits = DecodeLimits()) -> np.ndarray:
    """Decode `data` to a C-contiguous uint8 array of shape (size, size, 3).

    Raises ImageDecodeError for empty, oversized, truncated or unknown inputs.
    """
    if size <= 0:
        raise ValueError(f"size must be positive, got {size}")
    if not data:
        raise ImageDecodeError("empty image data")
    if len(data) > limits.max_bytes:
        raise ImageDecodeError(
            f"image is {len(data)} bytes, above the limit of {limits.max_bytes} bytes"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            img = Image.open(io.BytesIO(data))
            width, height = img.size
            if width * height > limits.max_pixels:
                raise ImageDecodeError(
                    f"image is {width}x{height} = {width * height} pixels, above the "
                    f"limit of {limits.max_pixels} (possible decompression bomb)"
                )
            if getattr(img, "n_frames", 1) > 1:
                img.seek(0)
            if img.format == "JPEG":
                # Decode at the smallest DCT scale still >= 2x the target on both sides.
                img.draft("RGB", (2 * size, 2 * size))
            img.load()
            rgb = to_rgb(ImageOps.exif_transpose(img))
            if rgb.size != (size, size):
                rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
            return np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8))
    except ImageDecodeError:
        raise
    except UnidentifiedImageError as exc:
        raise ImageDecodeError(f"not an image format envad can read ({len(data)} bytes "
                               f"starting {data[:8]!r})") from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageDecodeError(f"cannot decode image: {_reason(exc)}") from exc
    except Image.DecompressionBombError as exc:  # pragma: no cover - guard above fires first
        raise ImageDecodeError(str(exc)) from exc


def _reason(exc: BaseException) -> str:
    """Pillow's message without the in-memory file object it sometimes names."""
    text = _FILE_OBJECT.sub("the image", str(exc)).strip()
    return text or type(exc).__name__


def to_rgb(img: Image.Image) -> Image.Image:
    """Convert any Pillow mode to RGB: alpha onto grey, 16-bit scaled, CMYK converted."""
    mode = img.mode
    if mode == "RGB":
        return img
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        arr = np.asarray(img, dtype=np.uint32 if mode == "I" else np.uint16)
        peak = 65535 if mode != "I" else max(int(arr.max()), 1)
        grey = (arr.astype(np.float64) * (255.0 / peak)).round().clip(0, 255)
        return Image.fromarray(grey.astype(np.uint8), "L").convert("RGB")
    if mode == "F":
        values = np.asarray(img, dtype=np.float32)
        lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
        scaled = (values - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(values)
        return Image.fromarray(np.nan_to_num(scaled).astype(np.uint8), "L").convert("RGB")
    if mode == "P":
        img = img.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, ALPHA_BACKGROUND + (255,))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")
