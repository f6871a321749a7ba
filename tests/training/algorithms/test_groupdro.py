"""GroupDRO's exponentiated-gradient weights over environments."""

from __future__ import annotations

import math

import pytest
import torch

from envad.training.algorithms.groupdro import update_group_weights
from tiny_algorithms import build, steps


def test_weights_follow_losses():
    q = torch.full((3,), 1 / 3)
    new = update_group_weights(q, [0, 2], torch.tensor([1.0, 2.0]), eta=1.0)
    raw = torch.tensor([math.e, 1.0, math.e ** 2]) / 3
    torch.testing.assert_close(new, raw / raw.sum())
    assert new.sum().item() == pytest.approx(1.0)


def test_update_moves_weights(tiny_train_data):
    algorithm = build("groupdro", tiny_train_data, eta=0.5)
    algorithm.update(steps(tiny_train_data, 1)[0])
    assert algorithm.q.sum().item() == pytest.approx(1.0)
    assert not torch.allclose(algorithm.q, torch.full_like(algorithm.q, 1 / 6))
