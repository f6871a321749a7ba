"""MixStyle (Zhou et al., ICLR 2021, "Domain generalization with MixStyle").

Early ResNet feature maps carry a camera's style in their per-channel mean and standard
deviation. During training, with probability p per forward pass, each sample's feature
statistics are replaced by a convex mix of its own and another sample's (mixing weight
~ Beta(alpha, alpha)), so later layers see content under styles no single camera has.
Statistics are detached, as in the paper, so gradients do not flow through the style.
Inactive at inference: the exported graph has no trace of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: the paper's settings for domain generalisation (p 0.5, alpha 0.1, after res1 and res2)
DEFAULT_P = 0.5
DEFAULT_ALPHA = 0.1
EPS = 1e-6


def mix_statistics(x: torch.Tensor, partner: torch.Tensor, weight: torch.Tensor,
                   eps: float = EPS) -> torch.Tensor:
    """x normalised by its own per-channel statistics, re-styled with the mix
    weight * own + (1 - weight) * partner's statistics. x: [N,C,H,W]; partner: [N] row
    indices; weight: [N] in [0, 1]."""
    mean = x.mean(dim=(2, 3), keepdim=True).detach()
    std = (x.var(dim=(2, 3), keepdim=True) + eps).sqrt().detach()
    w = weight.to(x.dtype).view(-1, 1, 1, 1)
    mixed_mean = w * mean + (1 - w) * mean[partner]
    mixed_std = w * std + (1 - w) * std[partner]
    return (x - mean) / std * mixed_std + mixed_mean


@dataclass
class MixStyle:
    """One training step's MixStyle: called on each feature map it should restyle.

    Draws come from `generator` (the step's seeded generator), so resumed runs replay
    exactly. The coin is tossed once per call, as in the paper's implementation."""

    generator: torch.Generator
    p: float = DEFAULT_P
    alpha: float = DEFAULT_ALPHA

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = len(x)
        coin = float(torch.rand(1, generator=self.generator))
        if n < 2 or coin >= self.p:
            return x
        partner = torch.randperm(n, generator=self.generator).to(x.device)
        beta_seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        weight = np.random.default_rng(beta_seed).beta(self.alpha, self.alpha, n)
        return mix_statistics(x, partner, torch.from_numpy(weight).to(x.device))
