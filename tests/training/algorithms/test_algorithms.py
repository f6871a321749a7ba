"""Every registered algorithm: a few steps on tiny data, finite losses, weights move
(except `random`), deterministic for a seed, typed frozen hyperparameters."""

from __future__ import annotations

import dataclasses
import io
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


def conv_weights(algorithm) -> dict[str, torch.Tensor]:
    return {k: v for k, v in algorithm.named_parameters() if v.dim() == 4}


@pytest.mark.parametrize("name", names())
def test_placed_channels_last_changes_only_the_layout(name, tiny_train_data):
    """`place` puts every convolution weight (clones and momentum encoders included) in
    channels-last layout: the embeddings equal the contiguous model's up to float
    rounding, and a step runs with finite losses."""
    images = tiny_train_data.tensor(list(range(8)))
    plain = build(name, tiny_train_data, seed=4)
    placed = build(name, tiny_train_data, seed=4)
    placed.place("cpu")
    assert all(w.is_contiguous(memory_format=torch.channels_last)
               for w in conv_weights(placed).values())
    assert not placed.encoder.net.conv1.weight.is_contiguous()
    assert plain.encoder.net.conv1.weight.is_contiguous()
    for mode in (True, False):
        expected = plain.train(mode).embed(images).detach()
        assert torch.allclose(placed.train(mode).embed(images), expected, rtol=1e-4,
                              atol=1e-4)
    placed.prepare(tiny_train_data)
    logs = placed.update(steps(tiny_train_data, 1, seed=4)[0])
    assert all(math.isfinite(v) for v in logs.values()), logs


def test_placed_channels_last_an_erm_step_lands_on_the_same_weights(tiny_train_data):
    batch = steps(tiny_train_data, 1, seed=4)[0]
    weights = {}
    for layout in ("contiguous", "channels_last"):
        algorithm = build("erm", tiny_train_data, seed=4)
        if layout == "channels_last":
            algorithm.place("cpu")
        algorithm.update(batch)
        weights[layout] = torch.cat([v.flatten() for v in float_params(algorithm).values()])
    plain, placed = weights["contiguous"], weights["channels_last"]
    assert torch.linalg.vector_norm(placed - plain) <= 1e-3 * torch.linalg.vector_norm(plain)


def test_resumed_moments_take_the_layout_of_their_parameters(tiny_train_data):
    """A checkpoint's Adam moments in another layout than the placed parameters are
    converted: the fused kernel would otherwise update weights against the wrong
    moments. The resumed step equals the uninterrupted one exactly."""
    first, second = steps(tiny_train_data, 2, seed=6)
    running = build("erm", tiny_train_data, seed=6)
    running.update(first)                                 # contiguous moments
    saved = io.BytesIO()
    torch.save(running.training_state(), saved)           # as a checkpoint holds it
    saved.seek(0)
    state = torch.load(saved)
    resumed = build("erm", tiny_train_data, seed=6)
    resumed.load_training_state(state)
    resumed.place("cpu")
    running.place("cpu")
    for param, moments in resumed.optimizer.state.items():
        for value in moments.values():
            if torch.is_tensor(value) and value.shape == param.shape:
                assert value.stride() == param.stride()
    running.update(second)
    resumed.update(second)
    assert all(torch.equal(a, b)
               for a, b in zip(running.parameters(), resumed.parameters(), strict=True))
