"""MoCo v3 (Chen, Xie, He 2021) for ResNet: projector + predictor, momentum encoder with a
cosine momentum schedule, symmetric InfoNCE over two augmented views.

Self-supervised: the bucket labels are not used. Subclasses change how the two views are
made by overriding `views` (EA-MoCo takes its positive from another environment).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from envad.training.algorithms.base import Algorithm, OptimHparams
from envad.training.algorithms.registry import register
from envad.training.augment import VIEW1, VIEW2, augment


@dataclass(frozen=True)
class MoCoV3Hparams(OptimHparams):
    """From moco-v3's `main_moco.py` ResNet defaults: dim 256, mlp_dim 4096, momentum 0.99
    raised to 1 on a cosine schedule (`--moco-m-cos`), weight decay 1e-6. The optimizer
    is Adam at lr 1e-3 like the other algorithms here (moco-v3 uses LARS with lr 0.6 per
    256 images for batch 4096, out of reach on CPU). temperature 0.2 (moco-v3's ViT
    value; its ResNet default is 1.0): chosen by `envad sweep` on the training cameras'
    val split with the shipped recipe (docs/results/sweep-mocov3/: k-NN accuracy 51.0
    against 42.3 at 1.0, 48.5 at 0.5; the margin, 8.7 points, is above the split's
    sampling error, 3.2)."""

    weight_decay: float = 1e-6
    dim: int = 256
    mlp_dim: int = 4096
    temperature: float = 0.2
    momentum: float = 0.99
    momentum_cosine: bool = True


def moco_momentum(progress: float, base: float, cosine: bool = True) -> float:
    """Momentum at a fraction `progress` of training: base -> 1 along a half cosine."""
    if not cosine:
        return base
    return 1.0 - 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - base)


def contrastive_loss(q: torch.Tensor, k: torch.Tensor, temperature: float,
                     first: int = 0) -> torch.Tensor:
    """InfoNCE: row `first` + i of k is q_i's positive, the other rows its negatives
    (x 2T). `first` > 0: `q` holds one worker's rows of the minibatch, `k` every row."""
    q, k = F.normalize(q, dim=1), F.normalize(k, dim=1)
    logits = q @ k.T / temperature
    targets = torch.arange(first, first + len(q), device=q.device)
    return F.cross_entropy(logits, targets) * (2 * temperature)


def build_mlp(layers: int, in_dim: int, hidden: int, out_dim: int,
              last_bn: bool = True) -> nn.Sequential:
    """moco-v3's MLP: Linear-BN-ReLU blocks, then Linear (+ BN without affine)."""
    modules: list[nn.Module] = []
    for i in range(layers):
        d_in = in_dim if i == 0 else hidden
        d_out = out_dim if i == layers - 1 else hidden
        modules.append(nn.Linear(d_in, d_out, bias=False))
        if i < layers - 1:
            modules += [nn.BatchNorm1d(d_out), nn.ReLU(inplace=True)]
        elif last_bn:
            modules.append(nn.BatchNorm1d(d_out, affine=False))
    return nn.Sequential(*modules)


@register
class MoCoV3(Algorithm):
    """Base encoder + projector + predictor; momentum copy of encoder + projector."""

    name = "mocov3"
    hparams_class = MoCoV3Hparams
    supervised = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        hp = self.hparams
        self.projector = build_mlp(2, self.encoder.dim, hp.mlp_dim, hp.dim)
        self.predictor = build_mlp(2, hp.dim, hp.mlp_dim, hp.dim, last_bn=False)
        self.momentum_encoder = copy.deepcopy(nn.Sequential(self.encoder, self.projector))
        for param in self.momentum_encoder.parameters():
            param.requires_grad_(False)
        self.optimizer = self._adam([p for n, p in self.named_parameters()
                                     if not n.startswith("momentum_encoder.")])

    def views(self, x: torch.Tensor, rows: torch.Tensor, generator: torch.Generator
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """The two views whose embeddings must agree (here: two augmentations)."""
        return augment(x, VIEW1, generator), augment(x, VIEW2, generator)

    @torch.no_grad()
    def _momentum_update(self, m: float) -> None:
        base = nn.Sequential(self.encoder, self.projector)
        for p_base, p_mom in zip(base.parameters(), self.momentum_encoder.parameters(),
                                 strict=True):
            p_mom.mul_(m).add_(p_base.detach(), alpha=1.0 - m)

    def _update(self, env_batches, generator):
        x = torch.cat([b.x for b in env_batches])
        rows = torch.cat([b.rows for b in env_batches])
        v1, v2 = self.views(x, rows, generator)
        n = len(v1)
        hp = self.hparams
        m = moco_momentum(int(self.step) / self.total_steps, hp.momentum, hp.momentum_cosine)
        q = self.predictor(self.projector(self.encoder(torch.cat([v1, v2]))))
        with torch.no_grad():
            self._momentum_update(m)
            k = self.momentum_encoder(torch.cat([v1, v2]))
            # the negatives are every worker's keys, as one process would hold them
            k1, k2 = self.replicas.gather(k[:n]), self.replicas.gather(k[n:])
        first = self.replicas.rank * n
        loss = (contrastive_loss(q[:n], k2, hp.temperature, first)
                + contrastive_loss(q[n:], k1, hp.temperature, first))
        self._optimizer_step(loss)
        return {"loss": loss.item(), "momentum": m}
