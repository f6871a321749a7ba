"""The explicit registry: every algorithm of the issue, duplicates refused."""

from __future__ import annotations

import pytest

from envad.pipeline import DEFAULT_PIPELINE
from envad.training.algorithms import REGISTRY, Algorithm, get, names, register
from envad.training.algorithms.base import make_hparams


def test_all_algorithms_registered():
    assert names() == ["random", "erm", "irm", "fish", "lisa", "groupdro", "coral",
                       "mocov3", "ea_mocov3"]
    for name in names():
        assert issubclass(get(name), Algorithm) and get(name).name == name


def test_every_algorithm_takes_the_default_pipelines_hyperparameters():
    """`envad evaluate --pipeline default --algorithms A` works for every A: the shipped
    pipeline's hyperparameters (its schedule) are valid for each algorithm's dataclass,
    the untrained `random` reference included (it refused them before)."""
    assert DEFAULT_PIPELINE.hparams
    for name in names():
        hparams = make_hparams(get(name).hparams_class, dict(DEFAULT_PIPELINE.hparams))
        for key, value in DEFAULT_PIPELINE.hparams.items():
            assert getattr(hparams, key) == value


def test_duplicate_and_unknown_names():
    with pytest.raises(ValueError, match="already registered"):
        @register
        class Again(Algorithm):
            name = "erm"
    assert REGISTRY["erm"].__name__ == "ERM"
    with pytest.raises(ValueError, match="no name"):
        register(type("Nameless", (Algorithm,), {}))
    with pytest.raises(KeyError, match="unknown algorithm 'vrex'"):
        get("vrex")
