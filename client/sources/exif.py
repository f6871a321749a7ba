"""Capture times from EXIF, for images whose archive index gives none (plain image
trees, MegaDetector files).

Read from the bytes the backfill reads anyway (only the header is parsed), not while
listing the archive, so listing stays free of file reads. `DateTimeOriginal` (when the
shutter fired) is preferred over `DateTime` (when the file was last written); its
`OffsetTimeOriginal` gives the zone when the camera wrote one. Camera traps usually
write local time without a zone: such times are stored as UTC, as every naive time in
envad is (envad.client.sources.base.parse_timestamp).
"""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone

from PIL import Image, UnidentifiedImageError

EXIF_IFD = 0x8769
DATETIME = 0x0132             # IFD0: file change time
DATETIME_ORIGINAL = 0x9003    # Exif IFD: capture time
OFFSET_TIME_ORIGINAL = 0x9011
EXIF_FORMAT = "%Y:%m:%d %H:%M:%S"


def exif_timestamp(data: bytes) -> datetime | None:
    """The capture time in `data`'s EXIF, timezone-aware; None when there is none or it
    cannot be read (a damaged or absent EXIF block never fails an image)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            exif = image.getexif()
            exif_ifd = exif.get_ifd(EXIF_IFD)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return None
    when = _parse(exif_ifd.get(DATETIME_ORIGINAL)) or _parse(exif.get(DATETIME))
    if when is None:
        return None
    offset = _offset(exif_ifd.get(OFFSET_TIME_ORIGINAL))
    return when.replace(tzinfo=offset or timezone.utc)


def _parse(value) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value.strip().rstrip("\x00")[:19], EXIF_FORMAT)
    except ValueError:
        return None


def _offset(value) -> timezone | None:
    """'+02:00' / '-05:30' as a timezone; None when absent or malformed."""
    if not isinstance(value, str) or len(value.strip()) < 6:
        return None
    text = value.strip()
    sign = {"+": 1, "-": -1}.get(text[0])
    try:
        hours, minutes = int(text[1:3]), int(text[4:6])
    except ValueError:
        return None
    if sign is None or hours > 14 or minutes > 59:
        return None
    return timezone(sign * timedelta(hours=hours, minutes=minutes))
