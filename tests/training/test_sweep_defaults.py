"""The committed sweeps of the shipped recipe chose what each algorithm trains with now
(`envad sweep`'s rule: a chosen point becomes the algorithm's default)."""

from __future__ import annotations

import json
from pathlib import Path

from envad.pipeline import DEFAULT_PIPELINE
from envad.training.run import resolved_hparams
from envad.training.sweep import SWEEP_JSON

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
#: the training settings a sweep must share with the shipped pipeline to speak for it
RECIPE_KEYS = ("task", "augment", "aux", "epochs", "hparams")


def shipped_recipe_sweeps() -> list[Path]:
    shipped = DEFAULT_PIPELINE.to_json()
    return [path for path in sorted(RESULTS.glob("sweep*/" + SWEEP_JSON))
            if all(json.loads(path.read_text())["recipe"][key] == shipped[key]
                   for key in RECIPE_KEYS)]


def test_the_shipped_recipe_has_committed_sweeps() -> None:
    assert shipped_recipe_sweeps(), "no sweep of the shipped recipe under docs/results/"


def test_each_committed_sweep_chose_what_its_algorithm_trains_with_now() -> None:
    for path in shipped_recipe_sweeps():
        for algorithm, result in json.loads(path.read_text())["algorithms"].items():
            now = resolved_hparams(algorithm, dict(DEFAULT_PIPELINE.hparams))
            assert result["chosen_hparams"] == now, (path, algorithm)
