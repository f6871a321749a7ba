"""A camera-trap folder as users have them: nested camera/day folders of JPEGs with
EXIF capture times, mostly normal images and a few odd ones (tiny_encoder's kinds)."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from pathlib import Path

from PIL import Image

from tiny_encoder import synthetic_images

EXIF_IFD = 0x8769
DATETIME_ORIGINAL = 0x9003
FIRST_SHOT = datetime(2024, 6, 1, 6, 0, 0)


def jpeg_with_exif(png: bytes, taken: datetime | None) -> bytes:
    """`png` re-encoded as a JPEG whose EXIF DateTimeOriginal is `taken`."""
    exif = Image.Exif()
    if taken is not None:
        exif.get_ifd(EXIF_IFD)[DATETIME_ORIGINAL] = taken.strftime("%Y:%m:%d %H:%M:%S")
    out = io.BytesIO()
    with Image.open(io.BytesIO(png)) as image:
        image.convert("RGB").save(out, format="JPEG", quality=95, exif=exif)
    return out.getvalue()


def shot_time(n: int) -> datetime:
    return FIRST_SHOT + timedelta(minutes=7 * n)


def make_camera_folder(root: Path, *, cameras=("cam-a", "cam-b", "cam-c"), normal: int = 120,
                       odd: int = 4, seed: int = 1, odd_burst_s: float | None = None) -> Path:
    """`root/<camera>/<day>/IMG_nnnn.JPG`; the odd images are `ODD_n.JPG` of the first
    camera. Image n was taken at shot_time(n) (odd ones after every normal one), or with
    `odd_burst_s` the odd ones as one burst: `odd_burst_s` seconds apart, from
    shot_time(normal)."""
    images = synthetic_images("normal", normal, seed=seed) + synthetic_images("odd", odd,
                                                                                seed=seed + 1)
    for n, png in enumerate(images):
        camera = cameras[n % len(cameras)] if n < normal else cameras[0]
        name = f"IMG_{n:04d}.JPG" if n < normal else f"ODD_{n - normal}.JPG"
        path = root / camera / f"day{n % 2 + 1}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        taken = shot_time(n)
        if n >= normal and odd_burst_s is not None:
            taken = shot_time(normal) + timedelta(seconds=odd_burst_s * (n - normal))
        path.write_bytes(jpeg_with_exif(png, taken))
    return root
