"""Deep CORAL (Sun & Saenko 2016): align feature means and covariances across envs."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import torch
from torch.nn import functional as F

from envad.training.algorithms.base import OptimHparams, SupervisedAlgorithm, concat
from envad.training.algorithms.registry import register


@dataclass(frozen=True)
class CORALHparams(OptimHparams):
    """penalty_weight 1.0: DomainBed `mmd_gamma` for CORAL and WILDS'
    `coral_penalty_weight` default (its iWildCam config uses 10)."""

    penalty_weight: float = 1.0


def coral_penalty(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean squared difference of the feature means plus that of the covariances."""
    mean_a, mean_b = a.mean(0, keepdim=True), b.mean(0, keepdim=True)
    cov_a = (a - mean_a).T @ (a - mean_a) / max(len(a) - 1, 1)
    cov_b = (b - mean_b).T @ (b - mean_b) / max(len(b) - 1, 1)
    return (mean_a - mean_b).pow(2).mean() + (cov_a - cov_b).pow(2).mean()


@register
class CORAL(SupervisedAlgorithm):
    """Risk over all envs + CORAL penalty averaged over env pairs."""

    name = "coral"
    hparams_class = CORALHparams

    def _update(self, env_batches, generator):
        x, y, _ = concat(env_batches)
        features = self.encoder(x)
        nll = F.cross_entropy(self.classifier(features), y)
        # each env's features over the whole minibatch (every worker's shard)
        chunks = [self.replicas.gather(chunk)
                  for chunk in torch.split(features, [len(b.y) for b in env_batches])]
        pairs = list(combinations(range(len(chunks)), 2))
        penalty = (torch.stack([coral_penalty(chunks[i], chunks[j]) for i, j in pairs]).mean()
                   if pairs else features.new_zeros(()))
        loss = nll + self.hparams.penalty_weight * penalty
        self._step(loss)
        return {"loss": loss.item(), "nll": nll.item(), "penalty": penalty.item()}
