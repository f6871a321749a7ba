"""Golden-image parity: the server's decode + ONNX Runtime path equals the reference path.

The reference path is what training evaluation uses: the same `decode_image`, then the
encoder's own arithmetic (here NumPy in float64). Tolerance: 1e-4 absolute.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from envad.server.encoder import OnnxEncoder
from envad.server.images import decode_image
from tiny_encoder import build_tiny_encoder, reference_embed

TOLERANCE = 1e-4


def golden_images() -> list[bytes]:
    """Deterministic images in several formats and sizes, including a rotated JPEG."""
    rng = np.random.default_rng(1234)
    out = []
    for size, fmt in ((32, "PNG"), (97, "JPEG"), (640, "JPEG"), (50, "WEBP")):
        arr = rng.integers(0, 256, size=(size, size + 7, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        kwargs: dict[str, object] = {"quality": 90} if fmt == "JPEG" else {}
        if size == 97:
            exif = Image.Exif()
            exif[0x0112] = 3
            kwargs["exif"] = exif
        Image.fromarray(arr).save(buffer, format=fmt, **kwargs)
        out.append(buffer.getvalue())
    return out


def test_server_path_matches_reference_path(tmp_path):
    encoder = OnnxEncoder(build_tiny_encoder(tmp_path / "enc.onnx", dim=16, seed=3))
    pixels = np.stack([decode_image(data, encoder.input_size) for data in golden_images()])
    served = encoder.embed(pixels)
    reference = reference_embed(pixels, dim=16, seed=3)
    assert np.abs(served - reference).max() <= TOLERANCE
