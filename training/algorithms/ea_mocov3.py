"""EA-MoCo, the paper's Algorithm 1: MoCo v3 whose positive comes from another camera.

Step 1: train a diffusion autoencoder on all training environments and embed every
training image. Step 2: for each anchor, pick a different training environment at
random and take its image nearest to the anchor in the autoencoder's latent space as
the positive (not augmented); negatives are the rest of the batch, as in MoCo v3.
Only `views` and `prepare` differ from MoCo v3.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np
import torch

from envad.training.algorithms.mocov3 import MoCoV3, MoCoV3Hparams
from envad.training.algorithms.registry import register
from envad.training.augment import VIEW1, augment
from envad.training.diffusion_autoencoder import DiffusionAEConfig, encode_all, train_autoencoder

if TYPE_CHECKING:
    from envad.training.batches import TrainData

_AE = DiffusionAEConfig()


@dataclass(frozen=True)
class EAMoCoV3Hparams(MoCoV3Hparams):
    """MoCo v3's settings plus the diffusion autoencoder's (`ae_*`, see
    diffusion_autoencoder.DiffusionAEConfig; the paper gives no sizes, ours are small
    enough to train in well under a minute on 2 CPU cores at 32 px), except the
    temperature: 1.0, moco-v3's ResNet default, kept by EA-MoCo's own sweep
    (docs/results/sweep-ea_mocov3/: k-NN accuracy 44.0 against 43.8 at 0.2 and 40.0 at
    0.5, sampling error 3.2), where MoCo v3's chose 0.2."""

    temperature: float = 1.0
    ae_latent_dim: int = _AE.latent_dim
    ae_width: int = _AE.width
    ae_resolution: int = _AE.resolution
    ae_timesteps: int = _AE.timesteps
    ae_steps: int = _AE.steps
    ae_batch_size: int = _AE.batch_size
    ae_lr: float = _AE.lr

    def autoencoder_config(self) -> DiffusionAEConfig:
        return DiffusionAEConfig(**{f.name: getattr(self, "ae_" + f.name)
                                    for f in fields(DiffusionAEConfig)})


def mine_positives(latents: torch.Tensor, envs: torch.Tensor, generator: torch.Generator,
                   chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row: a random environment other than its own, and the row of that
    environment nearest in latent space (L2). Returns (positive rows, chosen envs)."""
    env_ids = torch.unique(envs)
    if len(env_ids) < 2:
        raise ValueError("EA-MoCo needs at least two training environments")
    n = len(latents)
    # choose uniformly among the other environments: draw an offset into the others
    own = torch.searchsorted(env_ids, envs)
    offset = torch.randint(1, len(env_ids), (n,), generator=generator)
    chosen = env_ids[(own + offset) % len(env_ids)]
    positives = torch.empty(n, dtype=torch.long)
    for env in env_ids.tolist():
        anchors = torch.nonzero(chosen == env).flatten()
        members = torch.nonzero(envs == env).flatten()
        for start in range(0, len(anchors), chunk):
            part = anchors[start:start + chunk]
            dist = torch.cdist(latents[part], latents[members])
            positives[part] = members[dist.argmin(dim=1)]
    return positives, chosen


@register
class EAMoCoV3(MoCoV3):
    """MoCo v3 with cross-environment nearest-neighbour positives."""

    name = "ea_mocov3"
    hparams_class = EAMoCoV3Hparams
    #: each training row's positive (a buffer, so checkpoints carry it)
    positives: torch.Tensor

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("positives", torch.zeros(0, dtype=torch.long))
        self.data: TrainData | None = None
        self.latents: torch.Tensor | None = None     # kept after prepare, for inspection
        self.autoencoder_loss: float | None = None

    def prepare(self, data: TrainData, progress: bool = False) -> None:
        """Train the autoencoder and mine positives (skipped when resumed with them)."""
        self.data = data
        if len(self.positives) == len(data):
            return
        def fetch(rows):
            return data.tensor(rows.numpy())

        model, self.autoencoder_loss = train_autoencoder(
            fetch, len(data), self.hparams.autoencoder_config(), seed=self.seed,
            progress=progress)
        self.latents = encode_all(model, fetch, len(data))
        generator = torch.Generator().manual_seed(self.seed + 7919)
        positives, _ = mine_positives(self.latents, torch.from_numpy(np.asarray(data.envs)),
                                      generator)
        self.positives = positives

    def views(self, x, rows, generator):
        if self.data is None or len(self.positives) == 0:
            raise RuntimeError("EA-MoCo: call prepare(train_data) before update()")
        anchor = augment(x, VIEW1, generator)
        positive = self.data.tensor(self.positives.cpu()[rows.cpu()].numpy()).to(x.device)
        return anchor, positive

    def load_training_state(self, state: dict) -> None:
        self.positives = torch.empty_like(state["model"]["positives"])
        super().load_training_state(state)
