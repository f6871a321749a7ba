"""The contrastive auxiliary term: NT-Xent itself, and a supervised algorithm that adds
it trains, lowers it, and round-trips through its checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

from envad.training.algorithms import get
from envad.training.aux_losses import (
    CONTRASTIVE_TEMPERATURE,
    PROJECTION_DIM,
    contrastive_term,
    nt_xent,
    projection_head,
)
from envad.training.batches import TrainData
from envad.training.data import load_folder
from envad.training.models import EncoderConfig
from tiny_algorithms import steps


@pytest.fixture(scope="module")
def class_data(tiny_photodigits):
    ds = load_folder(tiny_photodigits)
    return TrainData(ds, ds.indices("train", normal_only=True), 16, ds.envs("train"),
                     task="class")


def test_nt_xent_is_low_when_each_view_finds_its_partner():
    torch.manual_seed(0)
    z = torch.randn(16, 8)
    agreeing = nt_xent(z, z + 0.01 * torch.randn_like(z), 0.1)
    unrelated = nt_xent(z, torch.randn(16, 8), 0.1)
    assert agreeing < 0.1 < unrelated
    # equal projections everywhere: every one of the 2N - 1 others is equally likely
    flat = nt_xent(torch.ones(4, 3), torch.ones(4, 3), CONTRASTIVE_TEMPERATURE)
    assert flat.item() == pytest.approx(math.log(7), rel=1e-5)


def test_the_term_embeds_two_views_of_the_batch_through_the_head():
    torch.manual_seed(0)
    head = projection_head(16)
    assert head(torch.zeros(2, 16)).shape == (2, PROJECTION_DIM)
    encoder = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 16))
    x = torch.rand(6, 3, 8, 8)
    first = contrastive_term(encoder, head, x, torch.Generator().manual_seed(1))
    again = contrastive_term(encoder, head, x, torch.Generator().manual_seed(1))
    assert torch.isfinite(first) and torch.equal(first, again)      # seeded views


def test_an_erm_with_the_contrastive_term_lowers_it_and_round_trips(class_data):
    torch.manual_seed(0)
    algorithm = get("erm")(EncoderConfig(16), None, num_envs=6,
                           total_steps=12, seed=0, num_classes=6, aux="contrastive")
    batch = steps(class_data, 1, batch_size=8)[0]
    logs = [algorithm.update(batch) for _ in range(12)]
    terms = [log["contrastive"] for log in logs]
    assert all(math.isfinite(t) for t in terms) and "rotation" not in logs[0]
    assert sum(terms[-3:]) < sum(terms[:3])                # the same images: it learns them
    rebuilt = get("erm")(**algorithm.constructor_args(), load_weights=False)
    rebuilt.load_training_state(algorithm.training_state())
    assert rebuilt.aux == "contrastive"
    assert set(rebuilt.state_dict()) == set(algorithm.state_dict())
    assert any(k.startswith("contrastive_head.") for k in rebuilt.state_dict())
    algorithm.eval(), rebuilt.eval()
    x = torch.cat([b.x for b in batch])
    assert torch.allclose(rebuilt.embed(x), algorithm.embed(x))


def test_fish_refuses_the_contrastive_term():
    with pytest.raises(ValueError, match="auxiliary"):
        get("fish")(EncoderConfig(16), None, num_envs=2, total_steps=1, aux="contrastive")
