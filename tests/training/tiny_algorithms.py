"""Helpers for training tests: small hyperparameters, a few env-balanced steps, tiny
run configs."""

from __future__ import annotations

import torch

from envad.training.algorithms import get
from envad.training.batches import EnvBalancedSampler
from envad.training.models import EncoderConfig

#: shrink the heavy parts (MLPs, autoencoder training) so a step takes well under a second
FAST = {
    "mocov3": {"mlp_dim": 64, "dim": 32},
    "ea_mocov3": {"mlp_dim": 64, "dim": 32, "ae_steps": 3, "ae_width": 8,
                  "ae_batch_size": 16, "ae_latent_dim": 8},
}


def build(name: str, data, *, total_steps: int = 4, seed: int = 0, **hparams):
    """A fresh algorithm for `data` (16 px), seeded, with FAST hyperparameters."""
    torch.manual_seed(seed)
    values = {**FAST.get(name, {}), **hparams}
    return get(name)(EncoderConfig(data.size), values or None,
                     num_envs=len(data.env_names), total_steps=total_steps, seed=seed)


def steps(data, count: int, *, batch_size: int = 16, envs_per_step: int = 4, seed: int = 0,
          device: str = "cpu"):
    """`count` steps of EnvBatches from the env-balanced sampler."""
    sampler = EnvBalancedSampler(data.envs, batch_size, envs_per_step, seed)
    out = []
    for step in sampler.epoch(0):
        out.append([data.batch(env, rows, device) for env, rows in step])
        if len(out) == count:
            break
    return out


def float_params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def tiny_config(data, out, algorithm="erm", **overrides):
    """A TrainConfig small enough for tests: 16 px, batch 16, 2 epochs, all checkpoints."""
    from envad.training.run import TrainConfig

    values = dict(size=16, epochs=2, batch_size=16, keep_checkpoints=0)
    values.update(overrides)
    return TrainConfig(data=str(data), algorithm=algorithm, out=out, **values)
