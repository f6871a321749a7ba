"""Running per-camera statistics of raw embeddings, kept durable per encoder.

The camera-aware spaces (`center_l2`, `center_white_l2`) re-centre an unseen camera's
queries on that camera's own mean once it has sent enough images. The mean lives here:
a count and a float64 sum per camera, updated by every scored or ingested image that
names its camera, written atomically (temp file + fsync + rename) after each update so
that a restart or a kill never loses or half-writes it. `reset` forgets cameras (all of
them by default), for a camera that was moved or re-aimed.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from envad.server.detectors.geometry import CameraStats


class EnvStatistics:
    """count and sum of raw embeddings per camera; `path` None keeps them in memory."""

    def __init__(self, path: Path | None, dim: int):
        self.path = Path(path) if path is not None else None
        self.dim = dim
        self._counts: dict[str, int] = {}
        self._sums: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.is_file():
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        with np.load(self.path, allow_pickle=False) as data:
            names, counts, sums = data["names"], data["counts"], data["sums"]
        if sums.ndim != 2 or (len(sums) and sums.shape[1] != self.dim):
            raise ValueError(f"{self.path}: statistics of {sums.shape[-1]}-d vectors, "
                             f"expected {self.dim}")
        for name, count, total in zip(names, counts, sums, strict=True):
            self._counts[str(name)] = int(count)
            self._sums[str(name)] = total.astype(np.float64)

    def update(self, envs: Sequence[str] | np.ndarray, X: np.ndarray) -> None:
        """Add rows X from cameras `envs` (rows with an empty camera are ignored)."""
        X = np.asarray(X, dtype=np.float64)
        envs = np.asarray(envs).astype(str)
        if len(X) == 0:
            return
        with self._lock:
            for env in np.unique(envs):
                if not env:
                    continue
                rows = X[envs == env]
                self._counts[env] = self._counts.get(env, 0) + len(rows)
                self._sums[env] = self._sums.get(env, np.zeros(self.dim)) + rows.sum(axis=0)
            self._persist()

    def get(self, env: str) -> CameraStats | None:
        """The camera's count and mean, or None if it never sent an image."""
        with self._lock:
            count = self._counts.get(env, 0)
            if count == 0:
                return None
            return CameraStats(count, self._sums[env] / count)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self, envs: Iterable[str] | None = None) -> list[str]:
        """Forget the named cameras (all when None); returns the ones that were known."""
        with self._lock:
            names = list(self._counts) if envs is None else [e for e in envs
                                                             if e in self._counts]
            for env in names:
                del self._counts[env]
                del self._sums[env]
            self._persist()
            return sorted(names)

    def _persist(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        names = sorted(self._counts)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".envstats-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, names=np.array(names, dtype=np.str_),
                         counts=np.array([self._counts[n] for n in names], dtype=np.int64),
                         sums=(np.stack([self._sums[n] for n in names]) if names
                               else np.zeros((0, self.dim))))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
