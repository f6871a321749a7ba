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


def deciding_sweeps() -> dict[str, list[tuple[Path, dict]]]:
    """Per algorithm, its committed sweeps over the most seeds (more evidence decides: a
    later sweep over more seeds settles what a one-seed sweep left inside its
    tolerance); the others are kept as the record of how the default was reached."""
    sweeps: dict[str, list[tuple[int, Path, dict]]] = {}
    for path in shipped_recipe_sweeps():
        summary = json.loads(path.read_text())
        for algorithm, result in summary["algorithms"].items():
            sweeps.setdefault(algorithm, []).append((len(summary["seeds"]), path, result))
    return {algorithm: [(path, result) for seeds, path, result in found
                        if seeds == max(s for s, _, _ in found)]
            for algorithm, found in sweeps.items()}


def test_each_deciding_sweep_chose_what_its_algorithm_trains_with_now() -> None:
    for algorithm, sweeps in deciding_sweeps().items():
        now = resolved_hparams(algorithm, dict(DEFAULT_PIPELINE.hparams))
        for path, result in sweeps:
            assert result["chosen_hparams"] == now, (path, algorithm)


def test_every_trained_algorithm_has_a_deciding_sweep() -> None:
    from envad.training.algorithms import get, names

    trained = {name for name in names() if get(name).trains}
    assert trained <= set(deciding_sweeps()), sorted(trained - set(deciding_sweeps()))


def test_erm_s_two_seed_lr_sweep_decides_over_its_one_seed_sweep() -> None:
    (path, result), = deciding_sweeps()["erm"]
    assert path.parent.name == "sweep-erm-lr" and result["chosen_label"] == "lr=0.003"
