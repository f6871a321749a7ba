"""MoCo v3 mechanics: cosine momentum schedule, InfoNCE, momentum-encoder update."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from envad.training.algorithms.mocov3 import contrastive_loss, moco_momentum
from tiny_algorithms import build, steps


def test_momentum_schedule():
    assert moco_momentum(0.0, 0.99) == pytest.approx(0.99)
    assert moco_momentum(0.5, 0.99) == pytest.approx(0.995)
    assert moco_momentum(1.0, 0.99) == pytest.approx(1.0)
    # moco-v3: m = 1 - 0.5 (1 + cos(pi t)) (1 - m0)
    assert moco_momentum(0.25, 0.9) == pytest.approx(1 - 0.5 * (1 + math.cos(math.pi / 4)) * 0.1)
    values = [moco_momentum(t / 10, 0.99) for t in range(11)]
    assert values == sorted(values)
    assert moco_momentum(0.7, 0.99, cosine=False) == 0.99


def test_contrastive_loss():
    torch.manual_seed(0)
    q, k = torch.randn(6, 8), torch.randn(6, 8)
    logits = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T / 0.5
    expected = F.cross_entropy(logits, torch.arange(6)) * 2 * 0.5
    assert contrastive_loss(q, k, 0.5).item() == pytest.approx(expected.item(), rel=1e-6)
    eye = torch.eye(4)
    assert contrastive_loss(eye, eye, 0.01).item() < 1e-6      # perfect positives


def test_momentum_encoder_follows_the_base(tiny_train_data):
    algorithm = build("mocov3", tiny_train_data, total_steps=10, momentum=0.9)
    base = dict(torch.nn.Sequential(algorithm.encoder, algorithm.projector).named_parameters())
    base_before = {k: v.detach().clone() for k, v in base.items()}
    mom_before = {k: v.clone() for k, v in algorithm.momentum_encoder.named_parameters()}
    logs = algorithm.update(steps(tiny_train_data, 1)[0])
    m = moco_momentum(0 / 10, 0.9)
    assert logs["momentum"] == pytest.approx(m)
    for key, value in algorithm.momentum_encoder.named_parameters():
        assert not value.requires_grad
        torch.testing.assert_close(value, m * mom_before[key] + (1 - m) * base_before[key])
    optimized = {id(p) for group in algorithm.optimizer.param_groups for p in group["params"]}
    assert not optimized & {id(p) for p in algorithm.momentum_encoder.parameters()}
    logs = algorithm.update(steps(tiny_train_data, 2)[1])
    assert logs["momentum"] == pytest.approx(moco_momentum(1 / 10, 0.9))
