"""Classifier heads of the supervised algorithms, by name.

`linear`: a plain linear layer (the paper's and DomainBed's head).
`cosine`: normalised softmax — logits are the cosines between the L2-normalised
embedding and L2-normalised class weights, divided by a temperature of 0.05 (Zhai & Wu,
BMVC 2019, "Classification is a strong baseline for deep metric learning"). Training then
separates classes by angle, the geometry the `l2` space step and k-NN scoring read.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

COSINE_TEMPERATURE = 0.05


class CosineClassifier(nn.Module):
    """Logits = cos(embedding, class weight) / temperature."""

    def __init__(self, dim: int, num_classes: int, temperature: float = COSINE_TEMPERATURE):
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.temperature = temperature
        self.weight = nn.Parameter(torch.empty(num_classes, dim))
        nn.init.normal_(self.weight, std=dim ** -0.5)

    @property
    def out_features(self) -> int:
        """Number of classes (as nn.Linear names it)."""
        return self.weight.shape[0]

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return F.normalize(features, dim=1) @ F.normalize(self.weight, dim=1).T / self.temperature


#: head name -> constructor (embedding dim, number of classes) -> module
HEADS: dict[str, Callable[[int, int], nn.Module]] = {
    "linear": nn.Linear,
    "cosine": CosineClassifier,
}


def check_head(name: str) -> None:
    """Raise ValueError naming the known heads unless `name` is one."""
    if name not in HEADS:
        raise ValueError(f"head must be one of {', '.join(HEADS)}, got {name!r}")


def make_head(name: str, dim: int, num_classes: int) -> nn.Module:
    check_head(name)
    return HEADS[name](dim, num_classes)
