"""decode_image: formats, modes, orientation, animation, guards."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from envad.server.images import ALPHA_BACKGROUND, DecodeLimits, ImageDecodeError, decode_image


def encode(img: Image.Image, fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


def gradient(w: int = 64, h: int = 48) -> np.ndarray:
    x = np.linspace(0, 255, w, dtype=np.float64)
    y = np.linspace(0, 255, h, dtype=np.float64)
    return np.stack([np.tile(x, (h, 1)), np.tile(y[:, None], (1, w)),
                     np.full((h, w), 90.0)], -1).astype(np.uint8)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "TIFF", "BMP", "GIF"])
def test_formats_decode_to_rgb_uint8(fmt):
    out = decode_image(encode(Image.fromarray(gradient()), fmt), 32)
    assert out.shape == (32, 32, 3) and out.dtype == np.uint8 and out.flags.c_contiguous


@pytest.mark.parametrize("mode", ["L", "LA", "P", "RGBA", "CMYK", "I;16", "1", "I", "F"])
def test_modes_convert_to_rgb(mode):
    base = Image.fromarray(gradient())
    if mode == "I;16":
        img = Image.fromarray(np.asarray(base.convert("L"), np.uint16) * 257)
    elif mode in ("I", "F"):
        img = base.convert("L").convert(mode)
    else:
        img = base.convert(mode)
    fmt = "TIFF" if mode in ("CMYK", "I;16", "I", "F") else "PNG"
    out = decode_image(encode(img, fmt), 16)
    assert out.shape == (16, 16, 3)
    assert out.std() > 5  # content survived the conversion


def test_sixteen_bit_is_scaled_not_clipped():
    img = Image.fromarray(np.full((8, 8), 65535, np.uint16))
    assert decode_image(encode(img, "TIFF"), 8).min() == 255


def test_transparent_pixels_become_grey():
    rgba = np.zeros((8, 8, 4), np.uint8)
    out = decode_image(encode(Image.fromarray(rgba), "PNG"), 8)
    assert (out == np.array(ALPHA_BACKGROUND, np.uint8)).all()


def test_exif_orientation_is_applied():
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = 255  # left half white in a landscape image
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW for display
    data = encode(Image.fromarray(arr), "JPEG", exif=exif, quality=95)
    out = decode_image(data, 40)
    assert out[:10].mean() > 200 and out[-10:].mean() < 50  # white half is now on top


def test_animated_gif_uses_first_frame():
    red = Image.new("RGB", (16, 16), (255, 0, 0))
    blue = Image.new("RGB", (16, 16), (0, 0, 255))
    data = encode(red, "GIF", save_all=True, append_images=[blue], duration=50)
    out = decode_image(data, 16)
    assert out[..., 0].mean() > 200 and out[..., 2].mean() < 50


def test_large_jpeg_uses_reduced_decode_and_stays_close_to_full_decode():
    big = np.kron(gradient(64, 64), np.ones((32, 32, 1), np.uint8))  # 2048 px
    data = encode(Image.fromarray(big), "JPEG", quality=92)
    fast = decode_image(data, 64).astype(np.float64)
    full = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")
                      .resize((64, 64), Image.Resampling.BILINEAR), np.float64)
    assert np.abs(fast - full).mean() < 4.0


@pytest.mark.parametrize("data, message", [
    (b"", "empty"),
    (b"definitely not an image", "not an image format envad can read"),
])
def test_garbage_is_rejected(data, message):
    with pytest.raises(ImageDecodeError, match=message):
        decode_image(data, 32)


def malformed_images() -> list[bytes]:
    """Headers of known formats with broken bodies, and bytes of no format at all."""
    png = encode(Image.fromarray(gradient()), "PNG")
    jpeg = encode(Image.fromarray(gradient()), "JPEG")
    return [png[:40], png[:len(png) // 2], jpeg[:30], jpeg[:len(jpeg) // 2],
            b"GIF89a" + b"\x00" * 20, b"BM" + b"\x00" * 60, b"II*\x00" + b"\x00" * 40,
            b"RIFF\x00\x00\x00\x00WEBPVP8 ", b"\x00" * 100, b"<svg></svg>",
            b"%PDF-1.4", b"\xff\xd8\xff\xe0" + b"\xff" * 50]


@pytest.mark.parametrize("data", malformed_images(), ids=lambda d: repr(d[:6]))
def test_decode_errors_give_a_reason_not_a_file_object(data):
    with pytest.raises(ImageDecodeError) as caught:
        decode_image(data, 32)
    message = str(caught.value)
    assert "BytesIO" not in message and " at 0x" not in message
    assert len(message) > len("cannot decode image: ")


def test_truncated_file_is_rejected():
    data = encode(Image.fromarray(gradient()), "PNG")
    with pytest.raises(ImageDecodeError):
        decode_image(data[: len(data) // 2], 32)


def test_byte_and_pixel_limits():
    data = encode(Image.fromarray(gradient(200, 200)), "PNG")
    with pytest.raises(ImageDecodeError, match="bytes"):
        decode_image(data, 32, DecodeLimits(max_bytes=100))
    with pytest.raises(ImageDecodeError, match="decompression bomb"):
        decode_image(data, 32, DecodeLimits(max_pixels=10_000))


def _png_header_only(width: int, height: int) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def test_bomb_header_rejected_before_decoding():
    # A PNG claiming 100k x 100k pixels: only the header is read before refusing.
    with pytest.raises(ImageDecodeError, match="decompression bomb"):
        decode_image(_png_header_only(100_000, 100_000), 32)
