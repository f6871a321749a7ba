"""An append-only journal of per-camera statistic updates, so that an update costs one
small fsync'd append, whatever the number of cameras.

Each record: magic, sequence number, row count, camera name, the rows' float64 sum, and a
CRC-32 of all of it. A record is either whole and valid or it is the torn tail of a
write that never finished (a killed process, a full disk): reading stops at the first
record that is incomplete or fails its CRC, and the file is cut back to the last whole
record, so later appends never follow garbage.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"EVJ1"
_HEAD = struct.Struct("<4sQQI")        # magic, sequence, row count, name length (bytes)
_CRC = struct.Struct("<I")


@dataclass(frozen=True)
class Update:
    """`count` rows of camera `env` whose sum is `total`; `seq` orders updates."""

    seq: int
    env: str
    count: int
    total: np.ndarray


def encode(update: Update) -> bytes:
    name = update.env.encode("utf-8")
    body = (_HEAD.pack(MAGIC, update.seq, update.count, len(name)) + name
            + np.ascontiguousarray(update.total, dtype="<f8").tobytes())
    return body + _CRC.pack(zlib.crc32(body))


def decode_all(data: bytes, dim: int) -> tuple[list[Update], int]:
    """The whole valid records at the start of `data`, and the byte length they cover."""
    updates, offset = [], 0
    vector_bytes = 8 * dim
    while offset + _HEAD.size <= len(data):
        magic, seq, count, name_len = _HEAD.unpack_from(data, offset)
        end = offset + _HEAD.size + name_len + vector_bytes
        if magic != MAGIC or end + _CRC.size > len(data):
            break
        (crc,) = _CRC.unpack_from(data, end)
        if crc != zlib.crc32(data[offset:end]):
            break
        name_start = offset + _HEAD.size
        try:
            env = data[name_start:name_start + name_len].decode("utf-8")
        except UnicodeDecodeError:
            break
        total = np.frombuffer(data, dtype="<f8", count=dim,
                              offset=name_start + name_len).astype(np.float64)
        updates.append(Update(int(seq), env, int(count), total))
        offset = end + _CRC.size
    return updates, offset


class Journal:
    """The journal file of one statistics file; appends are fsync'd before they return.
    Written through an unbuffered descriptor, so a failed append leaves nothing queued."""

    def __init__(self, path: Path, dim: int):
        self.path = Path(path)
        self.dim = dim
        self.records = 0

    def read(self) -> list[Update]:
        """Every whole record; a torn tail is cut off the file."""
        if not self.path.is_file():
            return []
        data = self.path.read_bytes()
        updates, valid = decode_all(data, self.dim)
        if valid < len(data):
            with open(self.path, "r+b") as handle:
                handle.truncate(valid)
                handle.flush()
                os.fsync(handle.fileno())
        self.records = len(updates)
        return updates

    @contextmanager
    def _opened(self) -> Iterator[int]:
        """The journal open for appending, for one write: a descriptor held open between
        writes would keep its file system from being remounted read-only."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            yield fd
        finally:
            os.close(fd)

    def append(self, updates: list[Update]) -> None:
        data = memoryview(b"".join(encode(u) for u in updates))
        with self._opened() as fd:
            start = os.fstat(fd).st_size
            try:
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
            except BaseException:
                # leave no partial record behind a failed append (e.g. a full disk)
                os.ftruncate(fd, start)
                raise
        self.records += len(updates)

    def clear(self) -> None:
        """Empty the journal (its records are in a durable snapshot now)."""
        with self._opened() as fd:
            os.ftruncate(fd, 0)
            os.fsync(fd)
        self.records = 0

    def close(self) -> None:
        """Nothing stays open between writes; kept for the owners' close."""
