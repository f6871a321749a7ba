"""EXIF capture times (client/sources/exif.py) and their way into the store."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone

from PIL import Image

from camera_folder import jpeg_with_exif
from envad.client.sources.exif import DATETIME, EXIF_IFD, OFFSET_TIME_ORIGINAL, exif_timestamp
from tiny_encoder import synthetic_images

PNG = synthetic_images("normal", 1)[0]


def jpeg(exif: Image.Exif) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(PNG)).convert("RGB").save(out, format="JPEG", exif=exif)
    return out.getvalue()


def test_date_time_original_is_read_as_utc_when_the_camera_gives_no_zone() -> None:
    data = jpeg_with_exif(PNG, datetime(2024, 6, 1, 6, 30, 5))
    assert exif_timestamp(data) == datetime(2024, 6, 1, 6, 30, 5, tzinfo=timezone.utc)


def test_the_offset_the_camera_wrote_is_the_zone() -> None:
    exif = Image.Exif()
    ifd = exif.get_ifd(EXIF_IFD)
    ifd[0x9003] = "2024:06:01 06:30:05"
    ifd[OFFSET_TIME_ORIGINAL] = "+02:00"
    stamp = exif_timestamp(jpeg(exif))
    assert stamp is not None and stamp.utcoffset() == timedelta(hours=2)
    assert stamp.astimezone(timezone.utc).hour == 4


def test_date_time_is_the_fallback() -> None:
    exif = Image.Exif()
    exif[DATETIME] = "2023:12:31 23:59:59"
    assert exif_timestamp(jpeg(exif)) == datetime(2023, 12, 31, 23, 59, 59, tzinfo=timezone.utc)


def test_no_exif_bad_exif_and_non_images_give_none() -> None:
    assert exif_timestamp(PNG) is None
    exif = Image.Exif()
    exif.get_ifd(EXIF_IFD)[0x9003] = "0000:00:00 00:00:00"   # what some cameras write
    assert exif_timestamp(jpeg(exif)) is None
    assert exif_timestamp(b"not an image") is None


def test_score_store_keeps_the_capture_time(fitted_server, tmp_path, capsys) -> None:
    from envad.client import EnvadClient
    from envad.client.cli import main
    from envad.client.results import RowFilter

    image = tmp_path / "IMG_0001.JPG"
    image.write_bytes(jpeg_with_exif(synthetic_images("odd", 1)[0], datetime(2024, 7, 1, 5)))
    assert main(["score", str(image), "--store", "--split-name", "new",
                 "--server", fitted_server.address]) == 0
    with EnvadClient(fitted_server.address) as client:
        (row,) = [r for b in client.export(RowFilter(splits=("new",)), with_vectors=False)
                  for r in b.to_pylist()]
    assert row["timestamp"].replace(tzinfo=None) == datetime(2024, 7, 1, 5)
