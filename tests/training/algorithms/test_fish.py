"""Fish's meta step: outer weights move by meta_lr x (inner - outer)."""

from __future__ import annotations

import torch
from torch import nn

from envad.training.algorithms.fish import fish_meta_update
from tiny_algorithms import build, float_params, steps


def test_meta_update_formula():
    torch.manual_seed(0)
    outer = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    inner = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    inner[1].running_mean.fill_(2.0)
    inner[1].num_batches_tracked.fill_(7)
    before = {k: v.clone() for k, v in outer.state_dict().items()}
    fish_meta_update(outer, inner, 0.25)
    for key, value in outer.state_dict().items():
        new = inner.state_dict()[key]
        if value.is_floating_point():
            torch.testing.assert_close(value, before[key] + 0.25 * (new - before[key]))
        else:
            assert torch.equal(value, new)          # integer counters are copied


def test_update_applies_the_meta_step(tiny_train_data):
    algorithm = build("fish", tiny_train_data, meta_lr=0.3)
    outer_before = float_params(algorithm.encoder)
    algorithm.update(steps(tiny_train_data, 1)[0])
    inner = dict(algorithm.inner.named_parameters())   # inner = Sequential(encoder, head)
    for key, value in algorithm.encoder.named_parameters():
        expected = outer_before[key] + 0.3 * (inner["0." + key].detach() - outer_before[key])
        torch.testing.assert_close(value.detach(), expected, rtol=1e-5, atol=1e-6)
    assert any(not torch.equal(outer_before[k], v) for k, v in
               float_params(algorithm.encoder).items())
