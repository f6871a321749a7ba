"""CORAL's penalty: zero for identical feature statistics, mean and covariance terms."""

from __future__ import annotations

import pytest
import torch

from envad.training.algorithms.coral import coral_penalty


def test_penalty():
    torch.manual_seed(0)
    a = torch.randn(50, 4)
    assert coral_penalty(a, a.clone()).item() == pytest.approx(0.0, abs=1e-7)
    # a constant shift changes only the means: penalty = shift^2
    assert coral_penalty(a, a + 0.5).item() == pytest.approx(0.25, rel=1e-5)
    # scaling by 2 doubles the mean and quadruples the covariance
    cov = torch.cov(a.T)
    expected = a.mean(0).pow(2).mean() + (cov - 4 * cov).pow(2).mean()
    assert coral_penalty(a, 2 * a).item() == pytest.approx(expected.item(), rel=1e-4)
