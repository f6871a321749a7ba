"""ERM: plain cross-entropy on the bucket task over all environments pooled (Vapnik)."""

from __future__ import annotations

from torch.nn import functional as F

from envad.training.algorithms.base import OptimHparams, SupervisedAlgorithm, concat
from envad.training.algorithms.registry import register


@register
class ERM(SupervisedAlgorithm):
    """Empirical risk minimisation, the paper's main baseline."""

    name = "erm"
    hparams_class = OptimHparams

    def _update(self, env_batches, generator):
        x, y, _ = concat(env_batches)
        loss = F.cross_entropy(self.predict(x), y)
        self._step(loss)
        return {"loss": loss.item()}
