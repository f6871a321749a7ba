"""Every registered algorithm: a few steps on tiny data, finite losses, weights move
(except `random`), deterministic for a seed, typed frozen hyperparameters."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from envad.training.algorithms import names
from envad.training.algorithms.base import make_hparams
from tiny_algorithms import build, float_params, steps


@pytest.mark.parametrize("name", names())
def test_a_few_steps_deterministically(name, tiny_train_data):
    """Two steps: finite losses, weights move (not for `random`); a second instance with
    the same seed reproduces the first step exactly."""
    batches = steps(tiny_train_data, 2, seed=3)
    algorithm = build(name, tiny_train_data, seed=3)
    algorithm.prepare(tiny_train_data)
    before = float_params(algorithm.encoder)
    buffers = {k: v.clone() for k, v in algorithm.encoder.named_buffers()}
    snapshots = []
    for step in batches:
        assert len({b.env for b in step}) == 4          # several envs per step
        logs = algorithm.update(step)
        assert all(math.isfinite(v) for v in logs.values()), logs
        snapshots.append({k: v.clone() for k, v in algorithm.encoder.state_dict().items()})
    after = float_params(algorithm.encoder)
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    if algorithm.trains:
        assert "loss" in logs
        assert len(moved) > 0.9 * len(before), f"only {len(moved)} tensors changed"
    else:
        assert logs == {} and not moved
        assert all(torch.equal(v, buffers[k]) for k, v in algorithm.encoder.named_buffers())
    embedding = algorithm.eval().embed(tiny_train_data.tensor([0, 1, 2]))
    assert embedding.shape == (3, 512) and torch.isfinite(embedding).all()

    again = build(name, tiny_train_data, seed=3)
    again.prepare(tiny_train_data)
    again.update(batches[0])
    replay = again.encoder.state_dict()
    assert all(torch.equal(snapshots[0][k], replay[k]) for k in replay)


@pytest.mark.parametrize("name", names())
def test_hyperparameters_are_typed_frozen_and_documented(name, tiny_train_data):
    algorithm = build(name, tiny_train_data)
    hparams = algorithm.hparams
    assert dataclasses.is_dataclass(hparams)
    assert type(hparams).__doc__ and len(type(hparams).__doc__) > 20
    for f in dataclasses.fields(hparams):
        assert f.type, f.name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(hparams, f.name, getattr(hparams, f.name))
    with pytest.raises(ValueError, match="unknown"):
        make_hparams(type(hparams), {"no_such_field": 1})
    args = algorithm.constructor_args()
    assert args["hparams"] == dataclasses.asdict(hparams)
