"""The explicit registry: every algorithm of the issue, duplicates refused."""

from __future__ import annotations

import pytest

from envad.training.algorithms import REGISTRY, Algorithm, get, names, register


def test_all_algorithms_registered():
    assert names() == ["random", "erm", "irm", "fish", "lisa", "groupdro", "coral",
                       "mocov3", "ea_mocov3"]
    for name in names():
        assert issubclass(get(name), Algorithm) and get(name).name == name


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
