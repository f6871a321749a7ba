"""A MegaDetector batch-output JSON used as a file list.

Each entry of `images` is one item; `file` is resolved against `image_root` (default:
the JSON's folder) and is also the key. Backslashes are folder separators (MegaDetector
on Windows writes `cam\\IMG_0001.JPG`), and an absolute `file` (`/data/cams/...` or
`D:\\cams\\...`) that does not exist on this machine is found under `image_root` by its
longest trailing part that does (`D:\\cams\\cam1\\IMG.JPG` -> `IMAGE_ROOT/cam1/IMG.JPG`).
The environment is a folder level of the path relative to the image root (`env_level`,
default envad.defaults' 0 = the first folder, as camera-trap archives are usually laid
out one folder per camera). Entries with a `failure` are skipped; with `skip_empty`, so
are images without a detection of at least `min_conf` (default: the file's
typical_detection_threshold, else envad.defaults' MEGADETECTOR_MIN_CONF) in an
"animal", "person" or "vehicle" category.
The detections are kept in `extra` so a MegaDetector-format output can carry them on.

With `crops`, the items are the image's "animal" detections of at least `crop_min_conf`
(default: `min_conf`), one `CropItem` each (key `file#<detection index>`, the crop's
bytes, `extra` naming the image and the detection), so that every crop is scored on its
own and joined back to its image in the outputs; an image without such a detection is
listed as skipped with its detections.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath

from envad.client.sources.base import Source, SourceItem, json_head, register_source
from envad.client.sources.crops import CropItem, parse_bbox
from envad.defaults import MEGADETECTOR_ENV_LEVEL, MEGADETECTOR_MIN_CONF
from envad.errors import InvalidInput

DETECTION_NAMES = frozenset({"animal", "person", "vehicle"})


@register_source
class MegaDetectorSource(Source):
    """The images listed by a MegaDetector results file (see the module docstring)."""

    name = "megadetector"

    @classmethod
    def detect(cls, path: Path) -> bool:
        head = json_head(path)
        return '"images"' in head and ('"detection_categories"' in head or '"file"' in head)

    def __init__(
        self,
        path: str | Path,
        *,
        split: str | None = None,
        image_root: str | Path | None = None,
        env_level: int = MEGADETECTOR_ENV_LEVEL,
        skip_empty: bool = False,
        min_conf: float | None = None,
        crops: bool = False,
        crop_min_conf: float | None = None,
    ) -> None:
        super().__init__(path, split=split)
        try:
            self.results = json.loads(self.path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InvalidInput(f"{self.path} is not valid JSON: {exc}") from exc
        if not isinstance(self.results, dict) or not isinstance(self.results.get("images"), list):
            raise InvalidInput(f"{self.path}: not a MegaDetector results file (no images list)")
        self._image_root = (Path(image_root) if image_root else self.path.parent).resolve()
        self._tail_drop: int | None = None  # how many leading parts absolute files lose
        if env_level < 0:
            raise InvalidInput(f"env_level must be >= 0, got {env_level}")
        self.env_level = env_level
        self.skip_empty = skip_empty
        metadata = (self.results.get("info") or {}).get("detector_metadata") or {}
        self.min_conf = float(
            min_conf if min_conf is not None
            else metadata.get("typical_detection_threshold", MEGADETECTOR_MIN_CONF)
        )
        categories = (self.results.get("detection_categories")
                      or {"1": "animal", "2": "person", "3": "vehicle"})
        self.detection_categories = {str(k): str(v) for k, v in categories.items()}
        self.counted = {k for k, v in self.detection_categories.items() if v in DETECTION_NAMES}
        self.crops = crops
        self.crop_min_conf = float(crop_min_conf if crop_min_conf is not None else self.min_conf)
        self.animal = {k for k, v in self.detection_categories.items() if v == "animal"}

    def describe(self) -> dict[str, str]:
        return {
            **super().describe(),
            "image_root": str(self._image_root),
            "skip_empty": str(self.skip_empty),
            "min_conf": str(self.min_conf),
            # only when set, so that earlier checkpoints stay resumable
            **({"crops": str(self.crop_min_conf)} if self.crops else {}),
        }

    @property
    def image_root(self) -> Path:
        return self._image_root

    def count(self) -> int:
        return len(self.results["images"])

    def __iter__(self) -> Iterator[SourceItem]:
        for n, entry in enumerate(self.results["images"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
                raise InvalidInput(f"{self.path}: images[{n}] has no 'file' string")
            file = entry["file"]
            uri, relative = self.locate(file)
            folders = [p for p in relative.parts[:-1] if p not in ("/", "")]
            detections = entry.get("detections")
            env = folders[self.env_level] if len(folders) > self.env_level else ""
            skip_reason = self._skip_reason(entry, detections)
            if self.crops and not skip_reason:
                yield from self._crops(n, file, uri, env, detections or [])
                continue
            yield SourceItem(
                key=file,
                uri=uri,
                env=env,
                split=self._split(None),
                skip_reason=skip_reason,
                extra={"detections": detections} if detections is not None else {},
            )

    def _crops(self, n: int, file: str, uri: str, env: str,
               detections: list) -> Iterator[SourceItem]:
        """The image's animal detections of at least crop_min_conf, one CropItem each."""
        found = False
        for index, detection in enumerate(detections):
            if (str(detection.get("category")) not in self.animal
                    or float(detection.get("conf", 0.0)) < self.crop_min_conf):
                continue
            found = True
            yield CropItem(
                key=f"{file}#{index}", uri=uri, env=env, split=self._split(None),
                bbox=parse_bbox(detection.get("bbox"), f"{self.path}: images[{n}]"),
                extra={"image": file, "detection": index, "detections": detections},
            )
        if not found:
            yield SourceItem(key=file, uri=uri, env=env, split=self._split(None),
                             skip_reason=f"no animal detection >= {self.crop_min_conf:g}",
                             extra={"detections": detections})

    def locate(self, file: str) -> tuple[str, PurePosixPath]:
        """Where a `file` entry is on this machine, and its path below the image root
        (the whole path with `/` separators when it is absolute and not found)."""
        if "://" in file:
            return file, PurePosixPath(file.split("://", 1)[1])
        windows = PureWindowsPath(file)
        if windows.drive or windows.root:  # absolute: /x/y, \x\y, D:\x, \\server\share
            parts = [p for p in windows.parts[1:] if p]
            return self._locate_absolute(file, parts)
        relative = PurePosixPath(*[p for p in windows.parts if p])
        return str(self._image_root / relative), relative

    def _locate_absolute(self, file: str, parts: list[str]) -> tuple[str, PurePosixPath]:
        as_posix = PurePosixPath("/", *parts)
        if Path(as_posix).is_file():
            try:
                return str(as_posix), PurePosixPath(Path(as_posix).relative_to(self._image_root))
            except ValueError:
                return str(as_posix), as_posix
        drops = ([self._tail_drop] if self._tail_drop is not None else []) + list(
            range(len(parts)))
        for drop in drops:
            tail = PurePosixPath(*parts[drop:]) if drop < len(parts) else None
            if tail is not None and (self._image_root / tail).is_file():
                self._tail_drop = drop
                return str(self._image_root / tail), tail
        return str(as_posix), as_posix

    def _skip_reason(self, entry: dict, detections: list | None) -> str:
        if entry.get("failure"):
            return f"megadetector failure: {entry['failure']}"
        if self.skip_empty:
            best = max(
                (
                    float(d.get("conf", 0.0))
                    for d in detections or []
                    if str(d.get("category")) in self.counted
                ),
                default=0.0,
            )
            if best < self.min_conf:
                return f"no detection >= {self.min_conf:g}"
        return ""
