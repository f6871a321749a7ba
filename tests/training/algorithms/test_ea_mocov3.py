"""EA-MoCo: positives come from a different, random environment and are the nearest
there in the diffusion autoencoder's latent space; they are not augmented."""

from __future__ import annotations

import torch

from envad.training.algorithms.ea_mocov3 import mine_positives
from tiny_algorithms import build, steps


def test_mine_positives_by_hand():
    latents = torch.tensor([[0.0], [10.0], [1.0], [9.0], [0.4], [20.0]])
    envs = torch.tensor([0, 0, 1, 1, 2, 2])
    chosen_seen = [set() for _ in envs]
    for seed in range(50):
        positives, chosen = mine_positives(latents, envs, torch.Generator().manual_seed(seed))
        for i in range(len(envs)):
            assert chosen[i] != envs[i] and envs[positives[i]] == chosen[i]
            candidates = torch.nonzero(envs == chosen[i]).flatten()
            nearest = candidates[(latents[candidates] - latents[i]).abs().argmin()]
            assert positives[i] == nearest
            chosen_seen[i].add(int(chosen[i]))
    # anchor 0 (latent 0.0): env 1 -> row 2 (1.0), env 2 -> row 4 (0.4)
    assert all(len(s) == 2 for s in chosen_seen)      # both other envs get picked


def test_needs_two_environments():
    import pytest

    with pytest.raises(ValueError, match="two training environments"):
        mine_positives(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long),
                       torch.Generator())


def test_prepare_mines_cross_env_nearest_neighbours(tiny_train_data):
    algorithm = build("ea_mocov3", tiny_train_data)
    algorithm.prepare(tiny_train_data)
    positives, latents = algorithm.positives, algorithm.latents
    envs = torch.from_numpy(tiny_train_data.envs)
    assert len(positives) == len(tiny_train_data)
    assert (envs[positives] != envs).all()
    for i in range(len(positives)):
        members = torch.nonzero(envs == envs[positives[i]]).flatten()
        dist = torch.cdist(latents[i:i + 1], latents[members])[0]
        assert dist[members == positives[i]].item() == dist.min().item()

    # the positive view is the raw neighbour image (not augmented)
    batch = steps(tiny_train_data, 1)[0][0]
    anchor, positive = algorithm.views(batch.x, batch.rows, torch.Generator())
    assert torch.equal(positive, tiny_train_data.tensor(positives[batch.rows].numpy()))
    assert not torch.equal(anchor, batch.x)


def test_resume_keeps_positives(tiny_train_data):
    algorithm = build("ea_mocov3", tiny_train_data)
    algorithm.prepare(tiny_train_data)
    state = algorithm.training_state()
    again = build("ea_mocov3", tiny_train_data)
    again.load_training_state(state)
    again.prepare(tiny_train_data)
    assert again.autoencoder_loss is None               # no second autoencoder training
    assert torch.equal(again.positives, algorithm.positives)
