"""Self-supervised auxiliary terms a supervised algorithm adds to its task (`--aux`).

`contrastive`: SimCLR's NT-Xent (Chen et al., "A Simple Framework for Contrastive
Learning of Visual Representations", ICML 2020) on two augmented views of every image of
the update's batch, through a small projection head. Instance discrimination keeps what
tells one image from another, within a class too, where the class task alone keeps only
what separates the normal classes: new content that resembles a normal class is then not
mapped onto it. Labels are not used (SupCon would pull a class together, the opposite of
what the term is for).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from envad.training.augment import VIEW1, VIEW2, augment

#: temperature 0.5: SimCLR's CIFAR-10 setting (Chen et al. 2020, appendix B.9) and CSI's,
#: the contrastive novelty detector built on it (Tack et al., NeurIPS 2020)
CONTRASTIVE_TEMPERATURE = 0.5
#: weight 0.5: the rotation term's (Hendrycks et al., NeurIPS 2019), so the two
#: auxiliary terms are compared at one weight
CONTRASTIVE_WEIGHT = 0.5
#: SimCLR's projection head: 2-layer MLP, 128-d output
PROJECTION_DIM = 128


def projection_head(dim: int) -> nn.Sequential:
    """SimCLR's g(.): Linear(dim, dim), ReLU, Linear(dim, PROJECTION_DIM)."""
    return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(inplace=True),
                         nn.Linear(dim, PROJECTION_DIM))


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """NT-Xent over 2N projections: each view's positive is the other view of its image,
    its negatives the other 2N - 2 views (cosine similarity / temperature)."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    logits = z @ z.T / temperature
    n = len(z1)
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device),
                                float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
    return F.cross_entropy(logits, targets)


def contrastive_term(encoder: nn.Module, head: nn.Module, x: torch.Tensor,
                     generator: torch.Generator) -> torch.Tensor:
    """The unweighted contrastive loss of a batch: two views of every image (moco-v3's
    augmentations, training/augment.py), embedded in one pass and projected."""
    views = torch.cat([augment(x, VIEW1, generator), augment(x, VIEW2, generator)])
    z = head(encoder(views))
    return nt_xent(z[:len(x)], z[len(x):], CONTRASTIVE_TEMPERATURE)
