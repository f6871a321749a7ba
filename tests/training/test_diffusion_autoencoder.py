"""The diffusion autoencoder learns (its denoising loss drops) and encodes images."""

from __future__ import annotations

import torch

from envad.training.diffusion_autoencoder import (
    DiffusionAEConfig,
    DiffusionAutoencoder,
    encode_all,
    timestep_embedding,
    train_autoencoder,
)


def test_training_lowers_the_denoising_loss(tiny_train_data):
    config = DiffusionAEConfig(width=8, latent_dim=8, steps=40, batch_size=16, timesteps=50)

    def fetch(rows):
        return tiny_train_data.tensor(rows.numpy())

    def held_out_loss(model):
        x = fetch(torch.arange(32))
        return model.loss(x, torch.Generator().manual_seed(123)).item()

    torch.manual_seed(0)
    untrained = held_out_loss(DiffusionAutoencoder(config))
    model, _ = train_autoencoder(fetch, len(tiny_train_data), config, seed=0)
    assert held_out_loss(model) < untrained
    latents = encode_all(model, fetch, len(tiny_train_data), batch_size=50)
    assert latents.shape == (len(tiny_train_data), 8) and torch.isfinite(latents).all()


def test_resizes_large_inputs_and_embeds_time():
    model = DiffusionAutoencoder(DiffusionAEConfig(width=8, latent_dim=4, resolution=16))
    assert model.encode(torch.rand(2, 3, 64, 64)).shape == (2, 4)
    emb = timestep_embedding(torch.tensor([0, 5]), 32)
    assert emb.shape == (2, 32) and not torch.equal(emb[0], emb[1])
    assert model.alpha_bar[0] > model.alpha_bar[-1] > 0
