"""Running per-camera statistics of raw embeddings, kept durable per encoder.

The camera-aware spaces (`center_l2`, `center_white_l2`) re-centre an unseen camera's
queries on that camera's own mean once it has sent enough images. The mean lives here:
a count and a float64 sum per camera, updated by every scored or ingested image that
names its camera.

Durability: an update is appended to a journal (server/stats_journal.py: one small
fsync'd record per camera of the batch, whatever the number of cameras) before it is
applied; every `compact_every` records the whole state is written as a snapshot
(temp file + fsync + rename, tagged with the last record's sequence number) and the
journal is emptied. A restart reads the snapshot, then replays the journal records
newer than it, so a kill at any point loses no acknowledged update and counts none
twice. `reset` forgets cameras (all of them by default), for a camera that was moved or
re-aimed; it writes a snapshot at once.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from envad.server.detectors.geometry import CameraStats
from envad.server.stats_journal import Journal, Update

log = logging.getLogger(__name__)

#: journal records between snapshots
DEFAULT_COMPACT_EVERY = 2048
JOURNAL_SUFFIX = ".journal"


class EnvStatistics:
    """count and sum of raw embeddings per camera; `path` None keeps them in memory."""

    def __init__(self, path: Path | None, dim: int, *,
                 compact_every: int = DEFAULT_COMPACT_EVERY):
        self.path = Path(path) if path is not None else None
        self.dim = dim
        self.compact_every = compact_every
        self._counts: dict[str, int] = {}
        self._sums: dict[str, np.ndarray] = {}
        self._seq = 0                      # sequence number of the last update applied
        self._changes = 0                  # updates and resets since opened
        self._lock = threading.Lock()
        self._journal = (Journal(self.path.with_name(self.path.name + JOURNAL_SUFFIX), dim)
                         if self.path is not None else None)
        if self.path is not None:
            self._load()

    def _load(self) -> None:
        assert self.path is not None and self._journal is not None
        if self.path.is_file():
            with np.load(self.path, allow_pickle=False) as data:
                if "seq" not in data.files:
                    raise ValueError(
                        f"{self.path}: camera statistics of an unknown older format (no "
                        "seq): remove the file and its journal; the cameras' statistics "
                        "start again, as after `envad reset-camera-stats`")
                names, counts, sums = data["names"], data["counts"], data["sums"]
                self._seq = int(data["seq"])
            if sums.ndim != 2 or (len(sums) and sums.shape[1] != self.dim):
                raise ValueError(f"{self.path}: statistics of {sums.shape[-1]}-d vectors, "
                                 f"expected {self.dim}")
            for name, count, total in zip(names, counts, sums, strict=True):
                self._counts[str(name)] = int(count)
                self._sums[str(name)] = total.astype(np.float64)
        for update in self._journal.read():
            if update.seq > self._seq:      # older records are in the snapshot already
                self._apply(update)

    def _apply(self, update: Update) -> None:
        self._counts[update.env] = self._counts.get(update.env, 0) + update.count
        self._sums[update.env] = self._sums.get(update.env, np.zeros(self.dim)) + update.total
        self._seq = update.seq

    def update(self, envs: Sequence[str] | np.ndarray, X: np.ndarray) -> None:
        """Add rows X from cameras `envs` (rows with an empty camera are ignored); durable
        when it returns."""
        X = np.asarray(X, dtype=np.float64)
        envs = np.asarray(envs).astype(str)
        if len(X) == 0:
            return
        with self._lock:
            updates: list[Update] = []
            for env in np.unique(envs):
                if not env:
                    continue
                rows = X[envs == env]
                updates.append(Update(self._seq + len(updates) + 1, str(env), len(rows),
                                      rows.sum(axis=0)))
            if not updates:
                return
            if self._journal is not None:
                self._journal.append(updates)     # durable first, then visible
            for update in updates:
                self._apply(update)
            self._changes += 1
            if self._journal is not None and self._journal.records >= self.compact_every:
                try:
                    self._snapshot(self._counts, self._sums)
                except OSError as error:    # the update is durable in the journal already
                    log.warning("camera statistics snapshot failed, will retry: %s", error)

    def get(self, env: str) -> CameraStats | None:
        """The camera's count and mean, or None if it never sent an image."""
        with self._lock:
            count = self._counts.get(env, 0)
            if count == 0:
                return None
            return CameraStats(count, self._sums[env] / count)

    @property
    def seq(self) -> int:
        """Sequence number of the last update applied (0: none since the file began)."""
        with self._lock:
            return self._seq

    @property
    def changes(self) -> int:
        """Updates and resets since these statistics were opened."""
        with self._lock:
            return self._changes

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self, envs: Iterable[str] | None = None) -> list[str]:
        """Forget the named cameras (all when None); returns the ones that were known."""
        with self._lock:
            names = list(self._counts) if envs is None else [e for e in envs
                                                             if e in self._counts]
            counts = {e: c for e, c in self._counts.items() if e not in names}
            sums = {e: v for e, v in self._sums.items() if e not in names}
            if self.path is not None:
                self._snapshot(counts, sums)      # durable first, then visible
            self._counts, self._sums = counts, sums
            self._changes += 1
            return sorted(names)

    def reload(self) -> None:
        """Read the file again, replacing what is held (a reader's statistics, after the
        writer's newer snapshot was downloaded over the file)."""
        with self._lock:
            if self.path is None:
                return
            self._counts, self._sums, self._seq = {}, {}, 0
            self._load()
            self._changes += 1

    def snapshot(self) -> None:
        """Write the whole state now and empty the journal (no-op in memory)."""
        with self._lock:
            if self.path is not None:
                self._snapshot(self._counts, self._sums)

    def close(self) -> None:
        """Close the journal's file; a later update opens it again."""
        with self._lock:
            if self._journal is not None:
                self._journal.close()

    def _snapshot(self, counts: dict[str, int], sums: dict[str, np.ndarray]) -> None:
        """Write `counts` and `sums` atomically, tagged with the last sequence number, then
        empty the journal (a kill in between: the replay skips what the snapshot holds)."""
        assert self.path is not None and self._journal is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        names = sorted(counts)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".envstats-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, names=np.array(names, dtype=np.str_),
                         counts=np.array([counts[n] for n in names], dtype=np.int64),
                         sums=(np.stack([sums[n] for n in names]) if names
                               else np.zeros((0, self.dim))),
                         seq=np.array(self._seq, dtype=np.int64))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._journal.clear()
