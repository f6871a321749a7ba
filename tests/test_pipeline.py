"""envad.pipeline: the record of every choice that decides the scores."""

from __future__ import annotations

import pytest

from envad.pipeline import COSINE, DEFAULT_PIPELINE, PAPER_PIPELINE, Pipeline, resolve_pipeline


def test_training_names_differ_when_any_training_hparam_differs():
    base = Pipeline(algorithm="erm", task="class", augment="style", epochs=6, hparams=COSINE)
    faster = Pipeline(algorithm="erm", task="class", augment="style", epochs=6,
                      hparams={**COSINE, "lr": 0.003})
    longer_warmup = Pipeline(algorithm="erm", task="class", augment="style", epochs=6,
                             hparams={**COSINE, "warmup_fraction": 0.2})
    names = {base.training_name, faster.training_name, longer_warmup.training_name}
    assert len(names) == 3
    assert faster.training_name.endswith("-lr0.003")


def test_the_usual_cosine_warmup_keeps_the_short_name():
    assert DEFAULT_PIPELINE.training_name == (
        f"erm-class-style-cosine-e{DEFAULT_PIPELINE.epochs}")
    assert PAPER_PIPELINE.training_name == "erm-bucket-none-constant-e5"


def test_a_pipeline_round_trips_through_json_and_names_resolve(tmp_path):
    path = tmp_path / "selection.json"
    import json
    path.write_text(json.dumps({"chosen": DEFAULT_PIPELINE.to_json()}))
    assert resolve_pipeline(str(path)) == DEFAULT_PIPELINE
    assert resolve_pipeline("paper") == PAPER_PIPELINE
    with pytest.raises(ValueError, match="unknown pipeline"):
        resolve_pipeline("nonexistent")
