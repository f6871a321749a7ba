"""Env-balanced sampling and the training data cache."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from envad.training.batches import EnvBalancedSampler, TrainData
from envad.training.data import load_folder


def test_each_step_draws_several_envs():
    envs = np.repeat(np.arange(6), [50, 40, 30, 20, 10, 5])
    sampler = EnvBalancedSampler(envs, batch_size=64, envs_per_step=4, seed=0)
    assert sampler.per_env == 16 and sampler.steps_per_epoch == 3   # 155 / 64
    seen = Counter()
    for step in sampler.epoch(0):
        assert len(step) == 4 and len({env for env, _ in step}) == 4
        for env, rows in step:
            assert len(rows) == 16 and (envs[rows] == env).all()
            seen[env] += 1
    small = [rows for step in EnvBalancedSampler(envs, 64, 6, 0).epoch(0)
             for env, rows in step if env == 5]
    assert all(len(set(r.tolist())) == 5 for r in small)   # 10 per step from 5: each twice


def test_deterministic_per_seed_and_epoch():
    envs = np.repeat(np.arange(3), 20)
    a = [[(e, r.tolist()) for e, r in s] for s in EnvBalancedSampler(envs, 12, 2, 1).epoch(0)]
    b = [[(e, r.tolist()) for e, r in s] for s in EnvBalancedSampler(envs, 12, 2, 1).epoch(0)]
    c = [[(e, r.tolist()) for e, r in s] for s in EnvBalancedSampler(envs, 12, 2, 1).epoch(1)]
    assert a == b and a != c


def test_bad_sampler_arguments():
    with pytest.raises(ValueError):
        EnvBalancedSampler(np.array([], dtype=int), 8, 2, 0)
    with pytest.raises(ValueError):
        EnvBalancedSampler(np.zeros(4, dtype=int), 1, 1, 0)


def test_train_data_cache_and_batches(tiny_photodigits):
    ds = load_folder(tiny_photodigits)
    rows = ds.indices("train", normal_only=True)
    cached = TrainData(ds, rows, 16, ds.envs("train"))
    lazy = TrainData(ds, rows, 16, ds.envs("train"), cache_bytes=0)
    assert np.array_equal(cached.uint8([0, 5]), lazy.uint8([0, 5]))
    np.testing.assert_array_equal(cached.uint8([3])[0], ds.images([rows[3]], 16)[0])
    batch = cached.batch(2, np.array([0, 1]))
    assert batch.x.shape == (2, 3, 16, 16) and batch.env == 2 and batch.rows.tolist() == [0, 1]
    assert batch.y.tolist() == cached.buckets[:2].tolist()
    with pytest.raises(ValueError, match="normal images only"):
        TrainData(ds, ds.indices("test"), 16, ds.envs())
