"""Training data for one run and the environment-balanced sampler over it.

`TrainData` holds the normal training images of the training environments (decoded
once through the server's decoder when they fit in memory). `EnvBalancedSampler`
yields, per step, minibatches from several environments: the input of
`Algorithm.update(env_batches)`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from tqdm import tqdm

from envad.training.algorithms.base import EnvBatch
from envad.training.models import to_float_nchw
from envad.training.multienv import MultiEnvDataset
from envad.training.run_images import DECODE_CHUNK, DEFAULT_CACHE_BYTES

#: what supervised algorithms learn: the paper's two normal buckets, or every normal class
TASKS = ("bucket", "class")


def class_targets(labels: Sequence[str], class_names: Sequence[str]) -> np.ndarray:
    """Index of each label in `class_names` (every label must be one of them)."""
    index = {name: i for i, name in enumerate(class_names)}
    missing = sorted(set(labels) - set(index))
    if missing:
        raise ValueError(f"labels {missing[:5]} are not among the classes {list(class_names)}")
    return np.array([index[label] for label in labels], dtype=np.int64)


class TrainData:
    """Images at `size` px of dataset records `positions`, with env index, bucket and the
    training target of `task` (the bucket, or the index of the record's normal class in
    `class_names`, the sorted normal labels of these records)."""

    def __init__(self, dataset: MultiEnvDataset, positions: Sequence[int] | np.ndarray,
                 size: int,
                 env_names: Sequence[str], *, task: str = "bucket",
                 cache_bytes: int = DEFAULT_CACHE_BYTES, progress: bool = False):
        self.dataset = dataset
        self.positions = np.asarray(positions, dtype=np.int64)
        self.size = size
        self.env_names = list(env_names)
        index = {name: i for i, name in enumerate(self.env_names)}
        self.envs = np.array([index[e] for e in dataset.env_names(self.positions)],
                             dtype=np.int64)
        self.buckets = dataset.buckets(self.positions)
        if (self.buckets < 0).any():
            raise ValueError("training data must hold normal images only")
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        self.task = task
        labels = [dataset.records[int(i)].label for i in self.positions]
        self.class_names = sorted(set(labels))
        if task == "class" and len(self.class_names) < 2:
            raise ValueError("--task class needs at least two normal classes, found "
                             f"{self.class_names}")
        self.targets = (self.buckets if task == "bucket"
                        else class_targets(labels, self.class_names))
        self._pixels: np.ndarray | None = None
        if len(self.positions) * size * size * 3 <= cache_bytes:
            self._pixels = np.empty((len(self.positions), size, size, 3), dtype=np.uint8)
            for k in tqdm(range(0, len(self.positions), DECODE_CHUNK), desc="decoding",
                          unit="batch", disable=not progress, leave=False):
                chunk = self.positions[k:k + DECODE_CHUNK]
                self._pixels[k:k + len(chunk)] = dataset.images(chunk, size)

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def num_classes(self) -> int:
        """Number of training targets (2 buckets, or the normal classes)."""
        return 2 if self.task == "bucket" else len(self.class_names)

    def uint8(self, rows) -> np.ndarray:
        """uint8 [n, size, size, 3] of training rows."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._pixels is not None:
            return self._pixels[rows]
        return self.dataset.images(self.positions[rows], self.size)

    def tensor(self, rows) -> torch.Tensor:
        """float [n, 3, size, size] in [0, 1] of training rows."""
        return to_float_nchw(self.uint8(np.asarray(rows)))

    def batch(self, env: int, rows: np.ndarray, device: str = "cpu") -> EnvBatch:
        """The EnvBatch of training rows `rows` from environment `env`."""
        rows = np.asarray(rows, dtype=np.int64)
        return EnvBatch(x=self.tensor(rows).to(device),
                        y=torch.from_numpy(self.targets[rows]).to(device),
                        env=int(env), rows=torch.from_numpy(rows))


class EnvBalancedSampler:
    """Each step draws `envs_per_step` distinct environments uniformly and
    `batch_size // envs_per_step` images from each (without replacement within an env
    until it is exhausted, then a fresh permutation). An epoch has about as many images
    as the training set. Deterministic for (seed, epoch)."""

    def __init__(self, envs: np.ndarray, batch_size: int, envs_per_step: int, seed: int):
        envs = np.asarray(envs)
        self.by_env = {int(e): np.flatnonzero(envs == e) for e in np.unique(envs)}
        if not self.by_env:
            raise ValueError("no training images")
        if batch_size < 2:
            raise ValueError("batch_size must be at least 2")
        self.envs_per_step = max(1, min(envs_per_step, len(self.by_env)))
        self.per_env = max(1, batch_size // self.envs_per_step)
        self.seed = seed
        self.steps_per_epoch = max(1, math.ceil(len(envs) / (self.per_env *
                                                             self.envs_per_step)))

    def epoch(self, epoch: int) -> Iterator[list[tuple[int, np.ndarray]]]:
        """The steps of one epoch: each a list of (env, rows)."""
        rng = np.random.default_rng([self.seed, epoch])
        env_ids = np.array(sorted(self.by_env))
        queues = {e: rng.permutation(self.by_env[e]) for e in env_ids}
        cursor = {e: 0 for e in env_ids}
        for _ in range(self.steps_per_epoch):
            chosen = np.sort(rng.choice(env_ids, self.envs_per_step, replace=False))
            step = []
            for env in chosen.tolist():
                rows: list[int] = []
                while len(rows) < self.per_env:
                    if cursor[env] >= len(queues[env]):
                        queues[env], cursor[env] = rng.permutation(self.by_env[env]), 0
                    take = min(self.per_env - len(rows), len(queues[env]) - cursor[env])
                    rows.extend(queues[env][cursor[env]:cursor[env] + take].tolist())
                    cursor[env] += take
                step.append((env, np.array(rows, dtype=np.int64)))
            yield step
