"""GroupDRO (Sagawa et al. 2020): minimise a weighted risk, weights up-track bad envs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from envad.training.algorithms.base import OptimHparams, SupervisedAlgorithm, concat, per_env_losses
from envad.training.algorithms.registry import register


@dataclass(frozen=True)
class GroupDROHparams(OptimHparams):
    """eta 1e-2: DomainBed `groupdro_eta` and WILDS `group_dro_step_size`."""

    eta: float = 1e-2


def update_group_weights(q: torch.Tensor, envs: list[int], losses: torch.Tensor,
                         eta: float) -> torch.Tensor:
    """Exponentiated-gradient step on the env weights q (renormalised to sum 1)."""
    q = q.clone()
    for env, loss in zip(envs, losses, strict=True):
        q[env] = q[env] * torch.exp(eta * loss.detach())
    return q / q.sum()


@register
class GroupDRO(SupervisedAlgorithm):
    """Online group DRO over environments."""

    name = "groupdro"
    hparams_class = GroupDROHparams

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("q", torch.full((self.num_envs,), 1.0 / self.num_envs))

    def _update(self, env_batches, generator):
        x, _, _ = concat(env_batches)
        losses = torch.stack(per_env_losses(self.predict(x), env_batches))
        envs = [b.env for b in env_batches]
        # the weights follow each env's loss over the whole minibatch (every worker's
        # shard), so that they stay identical on every worker
        whole = self.replicas.mean(losses.detach())
        self.q.copy_(update_group_weights(self.q, envs, whole, self.hparams.eta))
        loss = (self.q[envs] * losses).sum()
        self._step(loss)
        return {"loss": loss.item(), "worst_env_loss": whole.max().item()}
