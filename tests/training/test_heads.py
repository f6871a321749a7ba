"""Classifier heads: the cosine head's logits, its use by every supervised algorithm, and
its refusal by algorithms that learn without labels."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from envad.pipeline import COSINE, Pipeline
from envad.training.algorithms import get, names
from envad.training.heads import COSINE_TEMPERATURE, CosineClassifier, make_head
from envad.training.models import EncoderConfig
from tiny_algorithms import steps


def test_cosine_logits_are_cosines_over_the_temperature():
    torch.manual_seed(0)
    head = CosineClassifier(8, 3)
    features = torch.randn(5, 8)
    expected = torch.stack([torch.stack([
        torch.dot(f, w) / (f.norm() * w.norm()) for w in head.weight]) for f in features])
    torch.testing.assert_close(head(features), expected / COSINE_TEMPERATURE)
    # the embedding's length does not change the logits: only its direction is trained
    torch.testing.assert_close(head(features * 7.5), head(features))
    assert head(features).abs().max() <= 1.0 / COSINE_TEMPERATURE + 1e-4


def test_heads_by_name():
    assert isinstance(make_head("linear", 8, 3), nn.Linear)
    assert make_head("cosine", 8, 3).out_features == 3
    with pytest.raises(ValueError, match="linear, cosine"):
        make_head("arcface", 8, 3)


SUPERVISED = [name for name in names() if get(name).supervised and get(name).trains]


def test_the_supervised_algorithms_are_the_six_with_labels():
    assert SUPERVISED == ["erm", "irm", "fish", "lisa", "groupdro", "coral"]


@pytest.mark.parametrize("name", SUPERVISED)
def test_every_supervised_algorithm_trains_a_cosine_head(name, tiny_train_data):
    torch.manual_seed(0)
    algorithm = get(name)(EncoderConfig(16), {"head": "cosine"}, num_envs=6, total_steps=2,
                          seed=0)
    assert isinstance(algorithm.classifier, CosineClassifier)
    before = algorithm.classifier.weight.detach().clone()
    logs = algorithm.update(steps(tiny_train_data, 1)[0])
    assert all(math.isfinite(v) for v in logs.values())
    assert not torch.equal(before, algorithm.classifier.weight)
    assert algorithm.constructor_args()["hparams"]["head"] == "cosine"


@pytest.mark.parametrize("name", ["mocov3", "ea_mocov3"])
def test_algorithms_without_labels_refuse_a_head(name):
    with pytest.raises(ValueError, match="supervised algorithms only"):
        get(name)(EncoderConfig(16), {"head": "cosine"}, num_envs=2, total_steps=1)


def test_an_unknown_head_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="head must be one of linear, cosine"):
        get("erm")(EncoderConfig(16), {"head": "cos"}, num_envs=2, total_steps=1)


def test_the_head_is_part_of_the_training_name():
    plain = Pipeline(algorithm="erm", task="class", epochs=15, hparams=COSINE)
    cosine = Pipeline(algorithm="erm", task="class", epochs=15,
                      hparams={**COSINE, "head": "cosine"})
    assert plain.training_name != cosine.training_name
    assert cosine.training_name.endswith("-headcosine")
