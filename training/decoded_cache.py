"""Decoded images kept on disk between runs, so a sweep decodes its dataset once.

`MultiEnvDataset.images` decodes every file it is asked for; the runs of a sweep, a
selection grid or repeated evaluations ask for the same images at the same size again
and again, and on camera-sized JPEGs decoding is the largest part of a run's fixed cost.
A call for at least `MIN_CACHED_IMAGES` images keeps its decoded array here, one `.npy`
file per call, named by a digest of what determines its pixels:

- each file's absolute path, size in bytes and modification time (nanoseconds), as
  Python keys its bytecode cache: an edited, replaced or moved file is decoded again;
- the output size, the decoder's source (a digest of `envad/server/images.py`, so any
  change to how images are decoded starts afresh) and Pillow's version.

Where: `$ENVAD_CACHE_DIR/decoded`, else `$XDG_CACHE_HOME/envad/decoded`, else
`~/.cache/envad/decoded`. How much: `$ENVAD_DECODED_CACHE_MB` (default 4096; 0 turns the
cache off); past it the least recently used arrays are deleted. A cache that cannot be
written (read-only, disk full) or holds a damaged file costs a warning and a decode,
never a wrong image or a failed run; files are written whole (temporary file, then
rename), so concurrent runs share the cache safely.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np
import PIL

from envad.server import images as decoder

log = logging.getLogger(__name__)

#: smaller calls (parity images, a probe's batch) decode faster than a file round trip
MIN_CACHED_IMAGES = 256
DEFAULT_LIMIT_MB = 4096
SUFFIX = ".npy"


def cache_directory() -> Path:
    """Where decoded arrays are kept (see the module docstring)."""
    if os.environ.get("ENVAD_CACHE_DIR"):
        return Path(os.environ["ENVAD_CACHE_DIR"]) / "decoded"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envad" / "decoded"


def limit_bytes() -> int:
    """The cache's size limit from `$ENVAD_DECODED_CACHE_MB` (0: no cache)."""
    raw = os.environ.get("ENVAD_DECODED_CACHE_MB", "").strip()
    if not raw:
        return DEFAULT_LIMIT_MB * 1024 * 1024
    try:
        megabytes = float(raw)
    except ValueError:
        megabytes = -1.0
    if not megabytes >= 0:
        raise ValueError(f"ENVAD_DECODED_CACHE_MB must be a number of megabytes >= 0 "
                         f"(0 turns the decoded-image cache off), got {raw!r}")
    return int(megabytes * 1024 * 1024)


@cache
def decoder_digest() -> str:
    """A digest of the decoder's source file: what `decode_image` does to the pixels."""
    return hashlib.blake2b(Path(decoder.__file__).read_bytes(), digest_size=16).hexdigest()


class DecodedCache:
    """Decoded uint8 image arrays in `directory`, at most `limit` bytes of them."""

    _warned: set[str] = set()

    def __init__(self, directory: Path, limit: int):
        self.directory = Path(directory)
        self.limit = int(limit)

    @classmethod
    def from_environment(cls) -> DecodedCache:
        return cls(cache_directory(), limit_bytes())

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def key(self, paths: Sequence[Path], size: int) -> str | None:
        """The digest naming the decoded array of `paths` at `size`; None when a file
        cannot be looked at (the decoder then reports it)."""
        digest = hashlib.blake2b(digest_size=20)
        digest.update(f"decoder {decoder_digest()}\0pillow {PIL.__version__}\0"
                      f"size {int(size)}\0files {len(paths)}\n".encode())
        try:
            for path in paths:
                stat = os.stat(path)
                digest.update(f"{os.path.abspath(path)}\0{stat.st_size}\0"
                              f"{stat.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
        except OSError:
            return None
        return digest.hexdigest()

    def load(self, key: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """The cached array of `key` if it is there, whole, and of `shape` (uint8)."""
        path = self.directory / (key + SUFFIX)
        try:
            handle = open(path, "rb")
        except OSError:                     # not there (or no cache folder): decode
            return None
        with handle:
            try:
                images = np.load(handle, allow_pickle=False)
            except (OSError, ValueError, EOFError) as exc:
                self._warn("damaged", f"decoded-image cache: {path} is damaged ({exc}); "
                                      "decoding again")
                self._discard(path)
                return None
        if images.dtype != np.uint8 or images.shape != tuple(shape):
            self._warn("damaged", f"decoded-image cache: {path} holds {images.dtype} "
                                  f"{images.shape}, not uint8 {tuple(shape)}; decoding again")
            self._discard(path)
            return None
        try:
            os.utime(path)                  # recently used: evicted last
        except OSError:
            pass
        return images

    def store(self, key: str, images: np.ndarray) -> None:
        """Keep `images` under `key` (whole or not at all), then evict past the limit."""
        if images.nbytes > self.limit:
            return
        path = self.directory / (key + SUFFIX)
        tmp = self.directory / f".{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as handle:
                np.save(handle, images, allow_pickle=False)
            os.replace(tmp, path)
            self._evict(keep=path)
        except OSError as exc:
            self._discard(tmp)
            self._warn("write", f"decoded-image cache at {self.directory} not written "
                                f"({exc}); runs decode their images each time "
                                "(ENVAD_DECODED_CACHE_MB=0 turns the cache off)")

    def _evict(self, keep: Path) -> None:
        """Delete the least recently used arrays until the cache is within its limit."""
        entries = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(SUFFIX):
                try:
                    stat = entry.stat()
                except FileNotFoundError:   # evicted by a concurrent run
                    continue
                entries.append((stat.st_mtime_ns, stat.st_size, Path(entry.path)))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.limit:
                break
            if path != keep:
                path.unlink(missing_ok=True)
                total -= size

    @staticmethod
    def _discard(path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError:                     # a read-only cache: the next store warns
            pass

    @classmethod
    def _warn(cls, kind: str, message: str) -> None:
        """Each kind of trouble once per process: a sweep does not repeat it per call."""
        if kind not in cls._warned:
            cls._warned.add(kind)
            log.warning("%s", message)
