"""The multi-environment dataset every source becomes: records labelled with (env,
label, split, bucket) and their images, decoded only through
`envad.server.images.decode_image` so that training sees exactly the pixels the server
sees.

Apart from `data.py` (which opens datasets from a spec and reads the folder format)
because the iWildCam reader builds these records too and `data.py` dispatches to it.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envad.errors import InvalidInput
from envad.server.images import decode_image
from envad.training.decoded_cache import MIN_CACHED_IMAGES, DecodedCache

SPLITS = ("train", "val", "test", "id_test")
NORMAL_A, NORMAL_B, ANOMALY = 0, 1, -1
#: files read and decoded together by `MultiEnvDataset.images`
DECODE_GROUP = 64
#: a group is decoded in threads when its files average at least this many bytes:
#: 640x480 camera JPEGs decode 1.6-2.1x faster on 2 threads of a 2-core machine, while
#: 32 px PNGs (a few KB) decode 2x slower there (the threads' hand-over costs more than
#: the decoding)
PARALLEL_DECODE_BYTES = 16 * 1024


def decode_threads() -> int:
    """Threads for decoding: the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


class DatasetError(InvalidInput):
    """A dataset on disk does not follow its format; the message says what to fix."""


@dataclass(frozen=True)
class Record:
    """One image: where it is and what it is. bucket: 0 normal_a, 1 normal_b, -1 anomaly."""

    id: str
    path: str
    env: str
    label: str
    split: str
    bucket: int
    is_anomaly: bool
    timestamp: str | None = None


class MultiEnvDataset:
    """Records plus access to their image bytes (paths are relative to `root`)."""

    def __init__(self, name: str, root: Path, records: Sequence[Record]):
        self.name = name
        self.root = Path(root)
        self.records: tuple[Record, ...] = tuple(records)
        self._split = np.array([r.split for r in self.records], dtype=object)
        self._env = np.array([r.env for r in self.records], dtype=object)
        self._normal = np.array([not r.is_anomaly for r in self.records], dtype=bool)
        #: where `images` first looks for a group decoded ahead (training/run_images.py's
        #: `DecodeAhead`: `take(group_key)` gives the pixels or None)
        self.decoded_ahead: Any = None

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return f"MultiEnvDataset({self.name!r}, {len(self)} images, {len(self.envs())} envs)"

    def read_bytes(self, i: int) -> bytes:
        """The encoded image file of record `i`."""
        return (self.root / self.records[i].path).read_bytes()

    def images(self, indices, size: int) -> np.ndarray:
        """Decode records `indices` to uint8 [N, size, size, 3] with the server's decoder,
        `DECODE_GROUP` files at a time; a group of large files (camera JPEGs: PIL lets go
        of the GIL while it decodes) is decoded on every core. A call for many images
        keeps its result in the decoded-image cache (training/decoded_cache.py) and
        takes it from there when none of the files has changed. A group that
        `decoded_ahead` holds is taken from it instead."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if self.decoded_ahead is not None:
            ahead = self.decoded_ahead.take(self.group_key(indices, size))
            if ahead is not None:
                return ahead
        cache = DecodedCache.from_environment()
        if len(indices) < MIN_CACHED_IMAGES or not cache.enabled:
            return self._decode(indices, size)
        key = cache.key([self.root / self.records[int(i)].path for i in indices], size)
        if key is None:
            return self._decode(indices, size)
        cached = cache.load(key, (len(indices), size, size, 3))
        if cached is not None:
            return cached
        out = self._decode(indices, size)
        cache.store(key, out)
        return out

    def group_key(self, indices, size: int) -> Hashable:
        """What names the images of records `indices` at `size` px in any process: the
        folder, the size and the files."""
        return (str(self.root), size, tuple(self.records[int(i)].path for i in indices))

    def _decode(self, indices: np.ndarray, size: int) -> np.ndarray:
        out = np.empty((len(indices), size, size, 3), dtype=np.uint8)
        workers = min(len(indices), decode_threads())
        pool: ThreadPoolExecutor | None = None

        def decode(position: int, data: bytes) -> None:
            out[position] = decode_image(data, size)

        try:
            for start in range(0, len(indices), DECODE_GROUP):
                group = [self.read_bytes(int(i)) for i in indices[start:start + DECODE_GROUP]]
                positions = range(start, start + len(group))
                large = sum(map(len, group)) >= PARALLEL_DECODE_BYTES * len(group)
                if workers > 1 and len(group) > 1 and large:
                    pool = pool or ThreadPoolExecutor(workers, thread_name_prefix="decode")
                    list(pool.map(decode, positions, group))
                else:
                    for position, data in zip(positions, group, strict=True):
                        decode(position, data)
        finally:
            if pool is not None:
                pool.shutdown()
        return out

    def indices(self, split: str | None = None, normal_only: bool = False,
                envs: Sequence[str] | None = None) -> np.ndarray:
        """Record positions matching a split, normality and environments (sorted)."""
        mask = np.ones(len(self.records), dtype=bool)
        if split is not None:
            if split not in SPLITS:
                raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
            mask &= self._split == split
        if normal_only:
            mask &= self._normal
        if envs is not None:
            mask &= np.isin(self._env, np.array(list(envs), dtype=object))
        return np.flatnonzero(mask)

    def envs(self, split: str | None = None) -> list[str]:
        """Sorted environment names (of one split if given)."""
        return sorted({r.env for r in self.records if split is None or r.split == split})

    def buckets(self, indices) -> np.ndarray:
        """Bucket (0, 1, or -1 for anomalies) of each record in `indices`."""
        return np.array([self.records[int(i)].bucket for i in indices], dtype=np.int64)

    def env_names(self, indices) -> list[str]:
        return [self.records[int(i)].env for i in indices]

    def without(self, envs: Sequence[str] = (), labels: Sequence[str] = ()
                ) -> MultiEnvDataset:
        """The same dataset minus every record of cameras `envs` or content `labels`
        (held out of training by pipeline selection); unknown names are errors."""
        unknown = sorted(set(envs) - set(self._env)) + sorted(
            set(labels) - {r.label for r in self.records})
        if unknown:
            raise DatasetError(f"cannot hold out {unknown}: not in {self.name}")
        held_envs, held_labels = set(envs), set(labels)
        kept = [r for r in self.records
                if r.env not in held_envs and r.label not in held_labels]
        return MultiEnvDataset(self.name, self.root, kept)
