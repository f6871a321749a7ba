"""Data-parallel training across processes: what each worker does inside the group.

Every worker (`envad train --workers N`, launched by training/workers.py) runs the same
sampler and takes an equal contiguous shard of every environment's minibatch of each
step (`shard_step`), so the algorithms keep their per-environment terms.
`ProcessGroupReplicas` is the algorithm's `replicas` (training/algorithms/replicas.py)
over torch.distributed: gradients are averaged after each backward, and the
environment terms that are not plain means (GroupDRO's weights, IRM's penalty, CORAL's
covariances, MoCo's negatives) are computed over the whole minibatch. Batch norm is
synchronised (`sync_batchnorm`): torch's `nn.SyncBatchNorm` refuses CPU tensors, so the
statistics are all-reduced here, on any backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from envad.training.algorithms.base import Algorithm
from envad.training.algorithms.replicas import SINGLE_PROCESS, Replicas


class _AllReduce(torch.autograd.Function):
    """Sum over the workers; the gradient of each worker's input is the sum of every
    worker's output gradient (each worker's loss depends on every input)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return _AllReduce.apply(grad)


def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """The sum of `tensor` over the workers, differentiable (torch's own differentiable
    all-reduce, torch.distributed.nn.functional's, is deprecated)."""
    return _AllReduce.apply(tensor)


class ProcessGroupReplicas:
    """The workers of torch.distributed's default process group."""

    def __init__(self) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        return all_reduce(tensor) / self.world_size

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        # all-reduce of zero padding: differentiable on every backend (gloo has no
        # reduce-scatter for all_gather's backward)
        n = len(tensor)
        before = tensor.new_zeros((self.rank * n, *tensor.shape[1:]))
        after = tensor.new_zeros(((self.world_size - self.rank - 1) * n, *tensor.shape[1:]))
        return all_reduce(torch.cat([before, tensor, after]))

    def average_gradients(self, params: Iterable[nn.Parameter]) -> None:
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        # one collective for all of them; reshape reads a channels-last gradient in its
        # logical order and copy_ writes it back in its own layout
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset:offset + grad.numel()].view(grad.shape))
            offset += grad.numel()

    def mean_values(self, values: dict[str, float]) -> dict[str, float]:
        """Each value's mean over the workers (the epoch's logged losses)."""
        keys = sorted(values)
        tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64)
        dist.all_reduce(tensor)
        return {k: float(v) / self.world_size for k, v in zip(keys, tensor, strict=True)}

    def broadcast_state(self, module: nn.Module) -> None:
        """Every parameter and buffer as worker 0 holds it."""
        for tensor in module.state_dict().values():
            buffer = tensor.contiguous()
            dist.broadcast(buffer, 0)
            if buffer.data_ptr() != tensor.data_ptr():
                tensor.copy_(buffer)


def mean_over_workers(values: dict[str, float], replicas: Replicas) -> dict[str, float]:
    """Each value's mean over the workers (as is with one)."""
    if isinstance(replicas, ProcessGroupReplicas):
        return replicas.mean_values(values)
    return values


def shard_step(step: Sequence[tuple[int, np.ndarray]], rank: int, world_size: int
               ) -> list[tuple[int, np.ndarray]]:
    """Worker `rank`'s part of one sampler step: the `rank`-th of `world_size` equal
    contiguous slices of every environment's rows (concatenated in rank order they are
    the step's rows)."""
    shards = []
    for env, rows in step:
        if len(rows) % world_size:
            raise ValueError(f"{len(rows)} images per environment do not split evenly over "
                             f"{world_size} workers")
        size = len(rows) // world_size
        shards.append((env, rows[rank * size:(rank + 1) * size]))
    return shards


def synced_batch_norm(norm: nn.modules.batchnorm._BatchNorm, x: torch.Tensor) -> torch.Tensor:
    """Training-mode batch norm of `x` with the statistics of every worker's batch (two
    differentiable all-reduces: the sums and count, then the centred squares); the
    running statistics are updated as `F.batch_norm` updates them."""
    dims = [0, *range(2, x.dim())]
    shape = [1, -1] + [1] * (x.dim() - 2)
    sums = all_reduce(torch.cat([x.sum(dims), x.new_full((1,), x.numel() / x.shape[1])]))
    count = sums[-1]
    mean = sums[:-1] / count
    centred = x - mean.view(shape)
    var = all_reduce(centred.pow(2).sum(dims)) / count
    if norm.track_running_stats and norm.running_mean is not None:
        _update_running_stats(norm, mean.detach(), var.detach() * count / (count - 1))
    out = centred * torch.rsqrt(var + norm.eps).view(shape)
    if norm.affine:
        out = out * norm.weight.view(shape) + norm.bias.view(shape)
    return out


@torch.no_grad()
def _update_running_stats(norm: nn.modules.batchnorm._BatchNorm, mean: torch.Tensor,
                          unbiased_var: torch.Tensor) -> None:
    assert (norm.num_batches_tracked is not None and norm.running_mean is not None
            and norm.running_var is not None)
    norm.num_batches_tracked.add_(1)
    factor = (1.0 / float(norm.num_batches_tracked) if norm.momentum is None
              else norm.momentum)
    norm.running_mean.mul_(1 - factor).add_(mean, alpha=factor)
    norm.running_var.mul_(1 - factor).add_(unbiased_var, alpha=factor)


class _Synced:
    """Batch norm whose training-mode statistics span every worker; in eval mode, or
    outside a process group, the plain layer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and dist.is_initialized() and dist.get_world_size() > 1:  # type: ignore[attr-defined]
            return synced_batch_norm(self, x)  # type: ignore[arg-type]
        return super().forward(x)  # type: ignore[misc]


class SyncBatchNorm1d(_Synced, nn.BatchNorm1d):
    pass


class SyncBatchNorm2d(_Synced, nn.BatchNorm2d):
    pass


_SYNCED: dict[type, type] = {nn.BatchNorm1d: SyncBatchNorm1d, nn.BatchNorm2d: SyncBatchNorm2d}
_PLAIN: dict[type, type] = {v: k for k, v in _SYNCED.items()}


def sync_batchnorm(module: nn.Module) -> int:
    """Make every BatchNorm1d/2d in `module` synchronised, in place: the same objects
    (parameters, buffers, optimizer references, state_dict keys and the folding and
    export code that checks for BatchNorm2d all unchanged), their class swapped for a
    subclass that overrides `forward` only. Returns how many."""
    layers = [m for m in module.modules() if type(m) in _SYNCED]
    for layer in layers:
        layer.__class__ = _SYNCED[type(layer)]
    return len(layers)


def plain_batchnorm(module: nn.Module) -> None:
    """Undo `sync_batchnorm` (before the export: the plain layers' graph)."""
    for layer in module.modules():
        if type(layer) in _PLAIN:
            layer.__class__ = _PLAIN[type(layer)]


def join(algorithm: Algorithm) -> ProcessGroupReplicas:
    """Make `algorithm` one worker of the process group: synchronised batch norm, worker
    0's weights and buffers, gradients averaged from now on."""
    replicas = ProcessGroupReplicas()
    sync_batchnorm(algorithm)
    replicas.broadcast_state(algorithm)
    algorithm.replicas = replicas
    return replicas


def leave(algorithm: Algorithm) -> None:
    """`algorithm` back to a single process (plain batch norm, nothing shared)."""
    plain_batchnorm(algorithm)
    algorithm.replicas = SINGLE_PROCESS
