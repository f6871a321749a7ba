"""ROC-AUC table and plot from a backfill's JSONL scores."""

from __future__ import annotations

import json

import numpy as np
import pytest

from envad.client.demo_report import ENSEMBLE, auc_table, format_table, load_scores, plot_roc


def write_scores(path, n=40, seed=0):
    rng = np.random.default_rng(seed)
    with path.open("w") as f:
        for i in range(n):
            anomaly = i % 4 == 0
            env = f"cam{i % 2}"
            perfect = 1.0 + anomaly          # separates the classes exactly
            inverted = 1.0 - anomaly         # ranks them exactly wrong
            noise = float(rng.random())
            f.write(json.dumps({
                "key": f"k{i}", "status": "ok", "env": env, "ensemble": perfect / 2,
                "detectors": {"Perfect": {"raw": perfect, "adapted": perfect, "calibrated": 0},
                              "Inverted": {"raw": inverted, "adapted": inverted,
                                           "calibrated": 0},
                              "Noise": {"raw": noise, "adapted": noise, "calibrated": 0}},
                "source": {"is_anomaly": anomaly}}) + "\n")
        f.write(json.dumps({"key": "bad", "status": "failed",
                            "source": {"is_anomaly": True}}) + "\n")
        f.write(json.dumps({"key": "nolabel", "status": "ok", "detectors": {},
                            "source": {}}) + "\n")


def test_auc_table(tmp_path) -> None:
    write_scores(tmp_path / "s.jsonl")
    scored = load_scores(tmp_path / "s.jsonl")
    assert len(scored.truth) == 40 and scored.truth.sum() == 10
    rows = {r.detector: r for r in auc_table(scored)}
    assert rows["Perfect"].pooled == rows["Perfect"].per_camera_mean == 1.0
    assert rows["Inverted"].pooled == 0.0
    assert 0.0 < rows["Noise"].pooled < 1.0
    assert rows[ENSEMBLE].pooled == 1.0
    assert "Perfect" in format_table(rows.values())


def test_plot_is_a_png(tmp_path) -> None:
    write_scores(tmp_path / "s.jsonl")
    scored = load_scores(tmp_path / "s.jsonl")
    path = plot_roc(scored, auc_table(scored), tmp_path / "out" / "roc.png", "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_needs_truth_and_both_classes(tmp_path) -> None:
    (tmp_path / "empty.jsonl").write_text(json.dumps({"status": "ok", "source": {}}) + "\n")
    with pytest.raises(ValueError, match="no scored image"):
        load_scores(tmp_path / "empty.jsonl")
    line = {"status": "ok", "env": "c", "ensemble": 0.1,
            "detectors": {"KNN": {"raw": 1.0, "adapted": 1.0, "calibrated": 0.1}},
            "source": {"is_anomaly": False}}
    (tmp_path / "one.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="both"):
        auc_table(load_scores(tmp_path / "one.jsonl"))


def test_scores_of_an_unknown_older_format_are_refused_naming_the_rerun(tmp_path) -> None:
    """Records written by a development version before envad 0.1.0 carry only `raw`."""
    line = {"status": "ok", "env": "c", "ensemble": 0.1,
            "detectors": {"KNN": {"raw": 1.0, "calibrated": 0.1}}, "source": {"is_anomaly": False}}
    (tmp_path / "old.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=r"unknown older format .*without `adapted`.*"
                                         r"rerun the demo"):
        load_scores(tmp_path / "old.jsonl")


def test_the_description_states_the_dataset_it_ran_on(tmp_path) -> None:
    from envad.client.demo_report import dataset_facts, describe_measurement
    from envad.training.photodigits import generate

    standard = generate(tmp_path / "standard", 32, 0, progress=False, train_per_camera=20,
                        test_per_camera=10)
    facts = dataset_facts(standard)
    assert facts.normal_labels == ("0", "1", "2", "3", "4", "5")
    assert (facts.train_cameras, facts.test_images, facts.test_cameras,
            facts.test_anomalies) == (6, 30, 3, 12)
    text = describe_measurement(facts)
    assert ("normal images (labels 0, 1, 2, 3, 4, 5) from the 6 training cameras of "
            "standard, then score the 30 images of the 3 cameras never seen in training "
            "(12 of them, 40%, anomalies: labels ") in text
    assert set(text.split("anomalies: labels ")[1].split(")")[0].split(", ")) <= \
        {"6", "7", "8", "9"}
    holdout = dataset_facts(generate(tmp_path / "holdout", 32, 0, progress=False,
                                     train_per_camera=20, test_per_camera=10,
                                     recipe="holdout"))
    assert holdout.normal_labels == ("0", "1", "4", "7", "8", "9")
    assert set(holdout.anomaly_labels) <= {"2", "3", "5", "6"}
    assert "labels 0, 1, 4, 7, 8, 9" in describe_measurement(holdout)
