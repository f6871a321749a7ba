"""The review report's contact sheet: the top images of every camera as one PNG (tiles
with file name, camera, score and verdict under each), for a terminal, a chat or an issue."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageOps

TILE = 192
CAPTION_H = 44
COLUMNS = 6
MAX_TILES = 48


def write_contact_sheet(path: Path, out_dir: Path, sections) -> Path:
    """Tile the sections' top images (their thumbnails under `out_dir`) into `path`."""
    entries = [entry for section in sections for entry in section.top][:MAX_TILES]
    rows = max(1, -(-len(entries) // COLUMNS))
    columns = min(COLUMNS, max(1, len(entries)))
    sheet = Image.new("RGB", (columns * TILE, rows * (TILE + CAPTION_H)), "white")
    draw = ImageDraw.Draw(sheet)
    for n, entry in enumerate(entries):
        x, y = (n % COLUMNS) * TILE, (n // COLUMNS) * (TILE + CAPTION_H)
        if entry.thumb.path:
            with Image.open(out_dir / entry.thumb.path) as thumb:
                tile = ImageOps.contain(thumb.convert("RGB"), (TILE, TILE))  # small: scale up
                sheet.paste(tile, (x + (TILE - tile.width) // 2, y + (TILE - tile.height) // 2))
        else:
            draw.rectangle((x + 4, y + 4, x + TILE - 4, y + TILE - 4), outline="gray")
            draw.text((x + 10, y + TILE // 2), "unreadable", fill="gray")
        image = entry.image
        colour = (176, 0, 0) if image.is_anomaly else (40, 40, 40)
        for line, text in enumerate(caption_lines(image)):
            draw.text((x + 4, y + TILE + 2 + 13 * line), text, fill=colour)
    sheet.save(path, "PNG")
    return path


def caption_lines(image) -> tuple[str, str, str]:
    """What a tile says under its image: the file name, the camera, and the score with
    its verdict and the detectors that voted for it."""
    verdict = "ANOMALY" if image.is_anomaly else "normal"
    return (_fit(image.file_name), image.env[:28],
            f"{image.ensemble:.3f} {verdict} {image.votes()}/{len(image.detectors)}")


def _fit(name: str, chars: int = 30) -> str:
    """A file name shortened in the middle to fit under a tile (its end kept: the
    camera's running number is there)."""
    return name if len(name) <= chars else name[:10] + "..." + name[-(chars - 13):]
