"""`random`: the untrained encoder (random init), the paper's "Random" column."""

from __future__ import annotations

from dataclasses import dataclass

from envad.training.algorithms.base import Algorithm, OptimHparams
from envad.training.algorithms.registry import register


@dataclass(frozen=True)
class RandomHparams(OptimHparams):
    """Nothing is trained, so none of these is used; the settings every trained
    algorithm shares are accepted, so that one pipeline's hyperparameters (the default
    pipeline's cosine schedule) apply to a whole grid, the untrained reference included."""


@register
class Random(Algorithm):
    """Keeps the randomly initialised (or loaded) encoder as it is."""

    name = "random"
    hparams_class = RandomHparams
    supervised = False
    trains = False

    def _update(self, env_batches, generator):
        return {}
