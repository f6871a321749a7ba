"""A small diffusion autoencoder, EA-MoCo's measure of which images look alike.

After Preechakul et al., "Diffusion Autoencoders" (CVPR 2022): a semantic encoder maps
an image to a latent z; a denoiser conditioned on z and the noise level predicts the
noise added to the image (DDPM, Ho et al. 2020, epsilon objective). The decoder can only
denoise well if z captures what the image holds, so distances between latents compare
images. Kept small (a few 10k parameters, at most 32 px) so it trains in seconds on CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm


@dataclass(frozen=True)
class DiffusionAEConfig:
    """latent_dim/width: model size; resolution: images are resized to at most this;
    timesteps: noise levels (linear betas of DDPM's 1000-step schedule rescaled);
    steps/batch_size/lr: its training (Adam)."""

    latent_dim: int = 64
    width: int = 16
    resolution: int = 32
    timesteps: int = 200
    steps: int = 250
    batch_size: int = 32
    lr: float = 2e-3


def _block(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1), nn.GroupNorm(4, c_out),
                         nn.SiLU())


class SemanticEncoder(nn.Module):
    """Image in [0,1] -> latent vector."""

    def __init__(self, c: DiffusionAEConfig):
        super().__init__()
        w = c.width
        self.net = nn.Sequential(_block(3, w), _block(w, 2 * w, 2), _block(2 * w, 4 * w, 2),
                                 _block(4 * w, 4 * w, 2), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(4 * w, c.latent_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class FiLMBlock(nn.Module):
    """conv -> norm -> scale/shift from the condition -> SiLU."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, stride, 1)
        self.norm = nn.GroupNorm(4, c_out, affine=False)
        self.film = nn.Linear(cond_dim, 2 * c_out)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.film(cond)[:, :, None, None].chunk(2, dim=1)
        return F.silu(self.norm(self.conv(x)) * (1 + scale) + shift)


class Denoiser(nn.Module):
    """A two-level U-Net predicting the noise in x_t, conditioned on (z, t)."""

    def __init__(self, c: DiffusionAEConfig):
        super().__init__()
        w, cond = c.width, 4 * c.width
        self.cond = nn.Sequential(nn.Linear(c.latent_dim + 32, cond), nn.SiLU(),
                                  nn.Linear(cond, cond))
        self.inc = FiLMBlock(3, w, cond)
        self.down1 = FiLMBlock(w, 2 * w, cond, stride=2)
        self.down2 = FiLMBlock(2 * w, 2 * w, cond, stride=2)
        self.up1 = FiLMBlock(4 * w, 2 * w, cond)
        self.up2 = FiLMBlock(3 * w, w, cond)
        self.out = nn.Conv2d(w, 3, 3, 1, 1)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        cond = self.cond(torch.cat([z, timestep_embedding(t, 32)], dim=1))
        h0 = self.inc(x_t, cond)
        h1 = self.down1(h0, cond)
        h2 = self.down2(h1, cond)
        u1 = self.up1(torch.cat([F.interpolate(h2, size=h1.shape[-2:]), h1], 1), cond)
        u2 = self.up2(torch.cat([F.interpolate(u1, size=h0.shape[-2:]), h0], 1), cond)
        return self.out(u2)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of integer timesteps (Transformer / DDPM style)."""
    freqs = torch.exp(-math.log(10_000) * torch.arange(dim // 2) / (dim // 2))
    angles = t.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class DiffusionAutoencoder(nn.Module):
    """Semantic encoder + conditional denoiser, trained with the DDPM noise objective."""

    #: cumulative product of (1 - beta) per timestep (a buffer)
    alpha_bar: torch.Tensor

    def __init__(self, config: DiffusionAEConfig = DiffusionAEConfig()):
        super().__init__()
        self.config = config
        self.encoder = SemanticEncoder(config)
        self.denoiser = Denoiser(config)
        scale = 1000 / config.timesteps
        betas = torch.linspace(1e-4 * scale, 0.02 * scale, config.timesteps).clamp(max=0.999)
        self.register_buffer("alpha_bar", torch.cumprod(1 - betas, dim=0))

    def _resize(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] > self.config.resolution:
            size = (self.config.resolution,) * 2
            x = F.interpolate(x, size=size, mode="bilinear", antialias=True,
                              align_corners=False)
        return x

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Latents of float images in [0, 1]."""
        return self.encoder(self._resize(x))

    def loss(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Noise-prediction MSE at a random noise level per image."""
        x = self._resize(x)
        x0 = x * 2 - 1
        t = torch.randint(0, self.config.timesteps, (len(x),), generator=generator)
        noise = torch.randn(x0.shape, generator=generator)
        a = self.alpha_bar[t].view(-1, 1, 1, 1)
        x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
        return F.mse_loss(self.denoiser(x_t, t, self.encoder(x)), noise)


def train_autoencoder(fetch: Callable[[torch.Tensor], torch.Tensor], n: int,
                      config: DiffusionAEConfig, *, seed: int = 0,
                      progress: bool = False) -> tuple[DiffusionAutoencoder, float]:
    """Train on images fetch(rows) for rows in 0..n-1; returns the model and last loss."""
    torch.manual_seed(seed)
    model = DiffusionAutoencoder(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(seed)
    loss = torch.zeros(())
    bar = tqdm(range(config.steps), desc="diffusion autoencoder", unit="step",
               disable=not progress, leave=False)
    for _ in bar:
        rows = torch.randint(0, n, (min(config.batch_size, n),), generator=generator)
        loss = model.loss(fetch(rows), generator)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        bar.set_postfix(loss=f"{loss.item():.4f}")
    return model.eval(), float(loss.item())


@torch.no_grad()
def encode_all(model: DiffusionAutoencoder, fetch: Callable[[torch.Tensor], torch.Tensor],
               n: int, batch_size: int = 256) -> torch.Tensor:
    """Latents [n, latent_dim] of every training image."""
    model.eval()
    chunks = [model.encode(fetch(torch.arange(i, min(i + batch_size, n))))
              for i in range(0, n, batch_size)]
    return torch.cat(chunks)
