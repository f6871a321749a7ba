"""`random`: the untrained encoder (random init), the paper's "Random" column."""

from __future__ import annotations

from dataclasses import dataclass

from envad.training.algorithms.base import Algorithm
from envad.training.algorithms.registry import register


@dataclass(frozen=True)
class RandomHparams:
    """No hyperparameters: nothing is trained."""


@register
class Random(Algorithm):
    """Keeps the randomly initialised (or loaded) encoder as it is."""

    name = "random"
    hparams_class = RandomHparams
    supervised = False
    trains = False

    def _update(self, env_batches, generator):
        return {}
