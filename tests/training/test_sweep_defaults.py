"""The committed sweeps of the shipped recipe chose what each algorithm trains with now
(`envad sweep`'s rule: a chosen point becomes the algorithm's default), except where a
committed `envad select` compared values of a hyperparameter for the shipped pipeline:
there the selection decides (the rule and its reason: envad/pipeline.py)."""

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


def selection_settled_keys() -> dict[str, list[tuple[Path, dict]]]:
    """Hyperparameter -> the committed selections that compared values of it among
    candidates of the shipped pipeline's algorithm, with what each chose (resolved)."""
    algorithm = DEFAULT_PIPELINE.algorithm
    settled: dict[str, list[tuple[Path, dict]]] = {}
    for path in sorted(RESULTS.glob("selection*/selection.json")):
        summary = json.loads(path.read_text())
        if summary["chosen"]["algorithm"] != algorithm:
            continue
        compared = [c["hparams"] for c in summary["candidates"].values()
                    if c["algorithm"] == algorithm]
        chosen = resolved_hparams(algorithm, summary["chosen"]["hparams"])
        for key in set().union(*compared):
            if len({json.dumps(hparams.get(key)) for hparams in compared}) > 1:
                settled.setdefault(key, []).append((path, chosen))
    return settled


def test_each_selection_chose_what_the_shipped_pipeline_trains_with_now() -> None:
    now = resolved_hparams(DEFAULT_PIPELINE.algorithm, dict(DEFAULT_PIPELINE.hparams))
    for key, selections in selection_settled_keys().items():
        for path, chosen in selections:
            assert chosen[key] == now[key], (path, key)


def test_each_deciding_sweep_chose_what_its_algorithm_trains_with_now() -> None:
    settled = selection_settled_keys()
    for algorithm, sweeps in deciding_sweeps().items():
        now = resolved_hparams(algorithm, dict(DEFAULT_PIPELINE.hparams))
        exempt = set(settled) if algorithm == DEFAULT_PIPELINE.algorithm else set()
        for path, result in sweeps:
            chosen = {k: v for k, v in result["chosen_hparams"].items() if k not in exempt}
            assert chosen == {k: v for k, v in now.items() if k not in exempt}, (
                path, algorithm)


def test_every_trained_algorithm_has_a_deciding_sweep() -> None:
    from envad.training.algorithms import get, names

    trained = {name for name in names() if get(name).trains}
    assert trained <= set(deciding_sweeps()), sorted(trained - set(deciding_sweeps()))


def test_erm_s_lr_is_the_selection_s_choice_not_the_sweep_s() -> None:
    (path, result), = deciding_sweeps()["erm"]
    assert path.parent.name == "sweep-erm-lr" and result["chosen_hparams"]["lr"] == 0.003
    (selection, chosen), = selection_settled_keys()["lr"]
    assert selection.parent.name == "selection-erm-lr" and chosen["lr"] == 0.001
    assert resolved_hparams("erm", dict(DEFAULT_PIPELINE.hparams))["lr"] == 0.001
