"""Fish (Shi et al. 2022): inner SGD over environments one by one, then a meta step.

Each update copies the network into an inner clone, takes one Adam step per
environment minibatch (in random order), and moves the outer weights a fraction
meta_lr of the way to the clone: theta <- theta + meta_lr (theta_inner - theta).
This approximates maximising the inner product of per-environment gradients.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from envad.training.algorithms.base import OptimHparams, SupervisedAlgorithm
from envad.training.algorithms.registry import register


@dataclass(frozen=True)
class FishHparams(OptimHparams):
    """meta_lr 0.5: DomainBed `meta_lr` (the Fish repo's iWildCam config uses 0.01
    with 24k ERM pre-training steps, which short runs do not have)."""

    meta_lr: float = 0.5


@torch.no_grad()
def fish_meta_update(outer: nn.Module, inner: nn.Module, meta_lr: float) -> None:
    """outer <- outer + meta_lr * (inner - outer) for float tensors (parameters and BN
    statistics); integer buffers (BN batch counters) are copied from `inner`."""
    inner_state = inner.state_dict()
    for key, value in outer.state_dict().items():
        new = inner_state[key]
        if value.is_floating_point():
            value.add_(meta_lr * (new - value))
        else:
            value.copy_(new)


@register
class Fish(SupervisedAlgorithm):
    """Gradient matching across environments through an inner loop + meta step."""

    name = "fish"
    hparams_class = FishHparams

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.aux != "none":
            raise ValueError("fish takes its steps in an inner loop: it has no auxiliary loss")
        self.inner = copy.deepcopy(self.outer())
        # the optimizer drives the inner clone; its moments persist across updates
        self.optimizer = self._adam(self.inner.parameters())

    def outer(self) -> nn.Sequential:
        """The outer network (shares the encoder and classifier modules)."""
        return nn.Sequential(self.encoder, self.classifier)

    def _update(self, env_batches, generator):
        outer = self.outer()
        self.inner.load_state_dict(outer.state_dict())
        self.inner.train()
        losses = []
        for k in torch.randperm(len(env_batches), generator=generator).tolist():
            batch = env_batches[k]
            loss = F.cross_entropy(self.inner(batch.x), batch.y)
            self._optimizer_step(loss)
            losses.append(loss.item())
        fish_meta_update(outer, self.inner, self.hparams.meta_lr)
        return {"loss": sum(losses) / len(losses)}
