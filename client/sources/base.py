"""What every archive source yields: `SourceItem`s, and the registry of source kinds.

A source lists an archive's images with their metadata without reading any image
bytes, so that listing millions of images, counting them for a progress bar and
skipping the ones a checkpoint already holds stay cheap. Bytes are read per item with
`SourceItem.read_bytes()`, in the backfill's worker threads.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import ClassVar

from envad.errors import InvalidInput

IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".bmp", ".gif"}
)
URL_READ_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SourceItem:
    """One image of an archive and what the archive says about it.

    key : unique and stable within the source (relative path, Camtrap DP
        deploymentID/mediaID): what a checkpoint remembers.
    id : the id to store the image under; "" means the sha256 of its bytes.
    uri : where the bytes are: an absolute local path or an http(s)/file URL.
    skip_reason : set when the source itself says not to process the image (a
        MegaDetector failure or an empty frame, a video in a Camtrap DP package).
    extra : source-specific values carried to the score outputs (e.g. `is_anomaly`
        of the folder format, MegaDetector `detections`).
    """

    key: str
    uri: str
    id: str = ""
    env: str = ""
    label: str = ""
    split: str = "archive"
    timestamp: datetime | None = None
    #: the event (burst) the image belongs to within its camera, such as a Camtrap DP
    #: eventID; stored with the row, so Fit's leave-out follows it ("" for none)
    event: str = ""
    skip_reason: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)

    def read_bytes(self) -> bytes:
        return read_uri(self.uri)


def read_uri(uri: str) -> bytes:
    """The bytes at a local path, a file:// URL or an http(s):// URL."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("http", "https"):
        with urllib.request.urlopen(uri, timeout=URL_READ_TIMEOUT_S) as response:
            return response.read()
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path)).read_bytes()
    return Path(uri).read_bytes()


def resolve_uri(base: Path, location: str) -> str:
    """A location from an archive's index: URLs stay, paths are resolved against `base`.

    A path written on Windows (`media\\dep1\\IMG_0001.JPG`) is read with `\\` as the
    separator, as MegaDetector sources read theirs; an absolute one (`D:\\cams\\...`) that
    does not exist here is found under `base` by its longest trailing part that does.
    """
    if urllib.parse.urlparse(location).scheme in ("http", "https", "file"):
        return location
    path = Path(location)
    if "\\" in location and not (path if path.is_absolute() else base / path).exists():
        return _windows_path(base, location)
    return str(path if path.is_absolute() else (base / path).resolve())


def _windows_path(base: Path, location: str) -> str:
    windows = PureWindowsPath(location)
    if not (windows.drive or windows.root):
        return str((base / PurePosixPath(*windows.parts)).resolve())
    parts = [p for p in windows.parts[1:] if p]
    for drop in range(len(parts)):
        tail = base.joinpath(*parts[drop:])
        if tail.is_file():
            return str(tail.resolve())
    return str(PurePosixPath("/", *parts))


def json_head(path: Path, size: int = 1 << 16) -> str:
    """The first `size` characters of a `.json` file, for telling JSON sources apart
    without parsing a large file ("" for anything else or an unreadable file)."""
    if not (path.is_file() and path.suffix.lower() == ".json"):
        return ""
    try:
        with path.open(encoding="utf-8") as f:
            return f.read(size)
    except (OSError, UnicodeDecodeError):
        return ""


def parse_timestamp(text: str | None, where: str = "") -> datetime | None:
    """An ISO 8601 timestamp ("" -> None); naive times are taken as UTC."""
    if text is None or not text.strip():
        return None
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidInput(f"{where}bad ISO 8601 timestamp {text!r}") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


class Source(ABC):
    """An archive of images. Subclasses register with `@register_source`."""

    #: registry name, used by `envad backfill --source-format NAME`
    name: ClassVar[str]

    def __init__(self, path: str | Path, *, split: str | None = None) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise InvalidInput(f"source {self.path} does not exist")
        self.split_override = split

    @classmethod
    @abstractmethod
    def detect(cls, path: Path) -> bool:
        """True when `path` looks like this kind of source (for auto-detection)."""

    @abstractmethod
    def __iter__(self) -> Iterator[SourceItem]:
        """Every image of the archive, in a stable order, without reading bytes."""

    def count(self) -> int:
        """Number of items (for the progress bar); cheap, reads no image bytes."""
        return sum(1 for _ in self)

    def describe(self) -> dict[str, str]:
        """What identifies this source in a checkpoint header."""
        return {"format": self.name, "path": str(self.path.resolve())}

    @property
    def image_root(self) -> Path:
        """The folder the archive's image paths are relative to (where outputs that name
        images by relative path, such as MegaDetector's `file`, resolve)."""
        root = self.path if self.path.is_dir() else self.path.parent
        return root.resolve()

    def _split(self, own: str | None) -> str:
        return self.split_override or own or "archive"


SOURCES: dict[str, type[Source]] = {}


def register_source(cls: type[Source]) -> type[Source]:
    """Class decorator adding a source kind to the registry; a duplicate name is an error."""
    if cls.name in SOURCES:
        raise ValueError(f"duplicate source name {cls.name!r}")
    SOURCES[cls.name] = cls
    return cls
