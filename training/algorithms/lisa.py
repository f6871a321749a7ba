"""LISA (Yao et al., ICML 2022): selective mixup that learns invariant predictors.

Each step picks a strategy: with probability p_sel *intra-label* (mix two images of the
same bucket from different environments: the label stays, the style is mixed away),
otherwise *intra-domain* (mix two images of different buckets from the same
environment: the style stays, the label is mixed, so style cannot predict it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from envad.training.algorithms.base import OptimHparams, SupervisedAlgorithm, concat
from envad.training.algorithms.registry import register


@dataclass(frozen=True)
class LISAHparams(OptimHparams):
    """alpha 2.0 (mixup Beta(alpha, alpha)) and p_sel 0.5: the LISA paper's defaults, as
    in DomainBed-style registries (`LISA_alpha`, `LISA_p_sel`)."""

    alpha: float = 2.0
    p_sel: float = 0.5


def lisa_partners(y: torch.Tensor, envs: torch.Tensor, intra_label: bool,
                  generator: torch.Generator) -> torch.Tensor:
    """For each sample, a random partner index: intra-label = same bucket, other env;
    intra-domain = same env, other bucket. A sample with no valid partner gets itself."""
    y, envs = y.cpu(), envs.cpu()
    same_label = y[:, None] == y[None, :]
    same_env = envs[:, None] == envs[None, :]
    allowed = (same_label & ~same_env) if intra_label else (same_env & ~same_label)
    scores = torch.rand(allowed.shape, generator=generator) + 1.0
    scores = torch.where(allowed, scores, torch.zeros_like(scores))
    partners = scores.argmax(dim=1)
    alone = ~allowed.any(dim=1)
    return torch.where(alone, torch.arange(len(y)), partners)


@register
class LISA(SupervisedAlgorithm):
    """Mixup of selected pairs with soft targets."""

    name = "lisa"
    hparams_class = LISAHparams

    def _update(self, env_batches, generator):
        x, y, envs = concat(env_batches)
        intra_label = bool(torch.rand((), generator=generator) < self.hparams.p_sel)
        partner = lisa_partners(y, envs, intra_label, generator).to(x.device)
        rng = np.random.default_rng(int(torch.randint(2**31, (), generator=generator)))
        lam = torch.as_tensor(rng.beta(self.hparams.alpha, self.hparams.alpha, len(y)),
                              dtype=x.dtype, device=x.device)
        mixed = lam.view(-1, 1, 1, 1) * x + (1 - lam.view(-1, 1, 1, 1)) * x[partner]
        targets = F.one_hot(y, self.num_classes).to(x.dtype)
        soft = lam[:, None] * targets + (1 - lam[:, None]) * targets[partner]
        loss = -(soft * F.log_softmax(self.predict(mixed), dim=1)).sum(1).mean()
        self._step(loss)
        paired = (partner != torch.arange(len(y), device=x.device)).float().mean()
        return {"loss": loss.item(), "intra_label": float(intra_label),
                "paired": paired.item()}
