"""IRMv1 penalty against hand-computed values; the penalty-weight anneal."""

from __future__ import annotations

import math

import pytest
import torch

from envad.training.algorithms.irm import irm_penalty
from tiny_algorithms import build, steps


def test_penalty_single_sample():
    # d/dw CE(w*[1,0], 0) at w=1 = (softmax_0 - 1) * 1 = -1/(e+1)
    penalty = irm_penalty(torch.tensor([[1.0, 0.0]]), torch.tensor([0]))
    assert penalty.item() == pytest.approx(1 / (math.e + 1) ** 2, rel=1e-6)


def test_penalty_two_samples():
    # sample 1: z=(2,0), y=0 -> -2/(e^2+1); sample 2: z=(0,1), y=1 -> -1/(e+1); mean, squared
    grad = 0.5 * (-2 / (math.e ** 2 + 1) - 1 / (math.e + 1))
    penalty = irm_penalty(torch.tensor([[2.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1]))
    assert penalty.item() == pytest.approx(grad ** 2, rel=1e-6)


def test_penalty_zero_for_uninformative_logits_and_differentiable():
    assert irm_penalty(torch.zeros(3, 2), torch.tensor([0, 1, 1])).item() == 0.0
    logits = torch.tensor([[1.0, -1.0]], requires_grad=True)
    irm_penalty(logits, torch.tensor([1])).backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_anneal_switches_weight_and_resets_adam(tiny_train_data):
    algorithm = build("irm", tiny_train_data, total_steps=20, penalty_weight=100.0,
                      anneal_fraction=0.1)
    assert algorithm.anneal_steps == 2
    batches = steps(tiny_train_data, 3)
    optimizers = []
    for step in batches:
        logs = algorithm.update(step)
        optimizers.append(algorithm.optimizer)
        expected = logs["nll"] + (100.0 * logs["penalty"] if len(optimizers) == 3
                                  else logs["penalty"])
        if len(optimizers) == 3:
            expected /= 100.0
        assert logs["loss"] == pytest.approx(expected, rel=1e-4)
    assert optimizers[0] is optimizers[1] and optimizers[2] is not optimizers[1]
