"""A COCO Camera Traps JSON: the metadata format of most public camera-trap datasets.

The file holds `images` (each with `id`, `file_name`, and usually `location`,
`datetime`, `seq_id`), `annotations` (`image_id`, `category_id`) and `categories`
(`id`, `name`). Each image is one item:

- key and id: the image's `id` (as text), so a re-run, and the dataset's own tools,
  name the same row;
- uri: `file_name` resolved against `image_root` (default: the JSON's folder);
- env: `location` (as text; "" when absent);
- timestamp: `datetime` (ISO 8601 such as "2012-03-11 14:58:42", or EXIF's
  "2012:03:11 14:58:42"; a naive time is UTC). A value that does not parse leaves the
  image without a timestamp rather than refusing the archive (public datasets carry
  some); a warning counts them;
- event: `seq_id`, the burst the image belongs to (stored, so Fit leaves a burst out
  as a whole; `--group-events` groups by it);
- label: the names of its annotations' categories, sorted and joined by ";" ("" for an
  image without annotation).
"""

from __future__ import annotations

import json
import logging
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from envad.client.sources.base import (
    Source,
    SourceItem,
    json_head,
    parse_timestamp,
    register_source,
    resolve_uri,
)
from envad.errors import InvalidInput

#: what the first 64 KiB of a COCO Camera Traps file show (a MegaDetector output names
#: its images by "file", not "file_name")
_SIGNATURE = ('"images"', '"file_name"')
_EXIF_DATE = re.compile(r"^(\d{4}):(\d{2}):(\d{2})")
log = logging.getLogger(__name__)


@register_source
class CocoCameraTrapsSource(Source):
    """The images of a COCO Camera Traps JSON (see the module docstring)."""

    name = "coco-camera-traps"

    @classmethod
    def detect(cls, path: Path) -> bool:
        head = json_head(path)
        return all(mark in head for mark in _SIGNATURE)

    def __init__(self, path: str | Path, *, split: str | None = None,
                 image_root: str | Path | None = None) -> None:
        super().__init__(path, split=split)
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"{self.path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("images"), list):
            raise InvalidInput(f"{self.path}: not a COCO Camera Traps file (no images list)")
        self._root = (Path(image_root) if image_root else self.path.parent).resolve()
        self.images = data["images"]
        self._labels = _labels_by_image(data, self.path)
        self.bad_timestamps = 0
        self._check_ids()

    def _check_ids(self) -> None:
        seen: set[str] = set()
        for n, image in enumerate(self.images):
            if not isinstance(image, dict) or "id" not in image or not image.get("file_name"):
                raise InvalidInput(f"{self.path}: images[{n}] lacks an id or a file_name")
            key = str(image["id"])
            if key in seen:
                raise InvalidInput(f"{self.path}: image id {key!r} appears twice")
            seen.add(key)

    def count(self) -> int:
        return len(self.images)

    @property
    def image_root(self) -> Path:
        return self._root

    def __iter__(self) -> Iterator[SourceItem]:
        self.bad_timestamps = 0
        for image in self.images:
            key = str(image["id"])
            location = image.get("location")
            event = "" if image.get("seq_id") is None else str(image["seq_id"])
            yield SourceItem(
                key=key,
                id=key,
                uri=resolve_uri(self._root, str(image["file_name"])),
                env="" if location is None else str(location),
                label=self._labels.get(key, ""),
                split=self._split(None),
                timestamp=self._timestamp(image.get("datetime")),
                event=event,
            )
        if self.bad_timestamps:
            log.warning("%s: %d image(s) have a datetime that does not parse; they are "
                        "stored without a timestamp", self.path, self.bad_timestamps)

    def _timestamp(self, value):
        if not value:
            return None
        try:
            return parse_timestamp(_EXIF_DATE.sub(r"\1-\2-\3", str(value)))
        except InvalidInput:
            self.bad_timestamps += 1
            return None


def _labels_by_image(data: dict, path: Path) -> dict[str, str]:
    """Image id -> its annotations' category names, sorted and joined by ";"."""
    names = {}
    for category in data.get("categories") or []:
        if isinstance(category, dict) and "id" in category:
            names[category["id"]] = str(category.get("name", category["id"]))
    found: dict[str, set[str]] = defaultdict(set)
    for n, annotation in enumerate(data.get("annotations") or []):
        if not isinstance(annotation, dict) or "image_id" not in annotation:
            raise InvalidInput(f"{path}: annotations[{n}] lacks an image_id")
        category = annotation.get("category_id")
        if category not in names:
            raise InvalidInput(f"{path}: annotations[{n}] names category {category!r}, "
                               "which the categories list lacks")
        found[str(annotation["image_id"])].add(names[category])
    return {image: ";".join(sorted(labels)) for image, labels in found.items()}
