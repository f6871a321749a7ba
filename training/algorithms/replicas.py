"""What an algorithm shares with the other workers of a data-parallel run.

Every algorithm holds one `Replicas` (`algorithm.replicas`). The default,
`SingleProcess`, shares nothing, so the algorithms never import torch.distributed;
`training/distributed.py` implements the same four operations across processes
(`envad train --workers N`), where each worker holds a shard of every environment's
minibatch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch


class Replicas(Protocol):
    """The workers of one run (`rank` of `world_size`), each with an equal shard."""

    rank: int
    world_size: int

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """The mean of `tensor` over the workers (differentiable)."""
        ...

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every worker's `tensor` concatenated along dim 0 in rank order, i.e. the rows
        of the whole minibatch in the order one process would hold them
        (differentiable: each worker's gradient flows back to its own rows)."""
        ...

    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Replace each parameter's gradient by its mean over the workers (before an
        optimizer step)."""
        ...


class SingleProcess:
    """One process holds the whole minibatch: nothing to share."""

    rank = 0
    world_size = 1

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        return None


SINGLE_PROCESS = SingleProcess()
