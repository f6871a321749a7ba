"""RESULTS.md assembly: claims judged against seed spread, side-by-side, plots copied."""

from __future__ import annotations

import json

import pytest

from envad.training import report_results as rr

DETECTORS = ["KNN", "KDE"]
# Mean AD per seed (in %) that each pretraining should get.
MEANS: dict[str, list[float]] = {"random": [50, 50, 50], "erm": [60, 61, 62], "fish": [70, 71, 72],
         "irm": [61, 59, 63.5], "lisa": [55, 56, 57], "mocov3": [65, 66, 67],
         "ea_mocov3": [80, 81, 82]}


def _cells(value: float) -> dict:
    cell = {"pooled": value / 100, "per_camera_mean": value / 100, "per_camera": {}}
    return {d: dict(cell) for d in DETECTORS} | {"Ensemble": dict(cell)}


def _report(tmp_path, partial: bool = False):
    runs = []
    for algorithm, values in MEANS.items():
        for seed, value in enumerate(values):
            if partial and algorithm == "ea_mocov3" and seed == 2:
                continue
            runs.append({"algorithm": algorithm, "seed": seed,
                         "variants": {"plain": {"ood": _cells(value)},
                                      "stylist": {"ood": _cells(value + 1)}}})
    report = {"config": {"algorithms": list(MEANS), "detectors": DETECTORS,
                         "seeds": [0, 1, 2], "size": 32, "epochs": 1, "batch_size": 64},
              "dataset": "photodigits-32", "runs": runs,
              "references": {"raw pixels": {"pooled": 0.55, "per_camera": 0.56}}}
    out = tmp_path / "pd32"
    out.mkdir()
    (out / "results.json").write_text(json.dumps(report))
    (out / "table.md").write_text("# Evaluation: x\n\nintro\n\n## Summary\n\n| a |\n")
    (out / "heatmap.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return out, report


def test_claims_are_judged_against_the_spread_over_seeds(tmp_path):
    _, report = _report(tmp_path)
    lines = "\n".join(rr.claims(report))
    assert "Fish > ERM: 71.0 ± 1.0 vs 61.0 ± 1.0 -> **holds**" in lines
    assert "IRM > ERM: 61.2 ± 2.3 vs 61.0 ± 1.0 -> **direction only" in lines
    assert "LISA > ERM: 56.0 ± 1.0 vs 61.0 ± 1.0 -> **does not hold**" in lines
    assert "EA-MoCo > MoCo v3: 81.0 ± 1.0 vs 66.0 ± 1.0 -> **holds**" in lines
    assert "EA-MoCo best of all pretrainings: 81.0 ± 1.0 -> **holds**" in lines


def test_ea_moco_not_best_names_the_winner(tmp_path):
    _, report = _report(tmp_path)
    report["runs"] = [r for r in report["runs"] if r["algorithm"] != "fish"] + [
        {"algorithm": "fish", "seed": s, "variants": {"plain": {"ood": _cells(90)}}}
        for s in range(3)]
    assert any("does not hold (best: Fish 90.0 ± 0.0)" in line for line in rr.claims(report))


@pytest.mark.parametrize("a, b, verdict", [
    ([70, 71, 72], [60, 61, 62], "holds"),
    ([61, 62, 63], [60, 61, 62], "direction only (gap within seed noise)"),
    ([60, 60, 60], [60, 61, 62], "does not hold"),
])
def test_compare(a, b, verdict):
    assert rr.compare(a, b) == verdict


def test_side_by_side_and_beyond(tmp_path):
    _, report = _report(tmp_path)
    table = rr.side_by_side(report)
    assert table.splitlines()[0].startswith("| detector | Random | ERM | Fish | IRM | LISA")
    assert "| **Mean AD** | 60.2 / 50.0 | 63.0 / 61.0 |" in table
    assert "| KNN | 73.2 / 50.0 | 75.7 / 61.0 |" in table
    lines = "\n".join(rr.beyond(report))
    assert "Stylist feature selection changes Mean AD by +1.0 points" in lines
    assert "KNN on raw pixels scores 55.0; the best encoder under KNN (EA-MoCo) 81.0" in lines


def test_results_document_from_a_report_dir(tmp_path):
    report_dir, _ = _report(tmp_path, partial=True)
    out, img = tmp_path / "docs" / "RESULTS.md", tmp_path / "docs" / "img"
    out.parent.mkdir()
    rr.main(["--report", str(report_dir), "--command", "envad evaluate --seeds 0,1,2",
             "--wall-time", "1h 2m", "--machine", "2-core CPU, no GPU", "--out", str(out),
             "--img-dir", str(img)])
    text = out.read_text()
    assert "- command: `envad evaluate --seeds 0,1,2`" in text
    assert "- wall time: 1h 2m; machine: 2-core CPU, no GPU" in text
    assert "**Partial**: not yet evaluated: ea_mocov3 s2." in text
    assert "### Summary" in text and "EA-MoCo > MoCo v3" in text
    assert "![pd32 heatmap.png](img/pd32-heatmap.png)" in text
    assert (img / "pd32-heatmap.png").read_bytes().startswith(b"\x89PNG")


def test_the_training_task_is_always_named(tmp_path):
    """Reports leave the paper's bucket task out of their config; the section names it."""
    report_dir, report = _report(tmp_path)
    out = tmp_path / "RESULTS.md"
    rr.main(["--report", str(report_dir), "--out", str(out), "--img-dir",
             str(tmp_path / "img")])
    assert "pretrainings: random, erm, fish, irm, lisa, mocov3, ea_mocov3; task bucket\n" \
        in out.read_text()
    report["config"].update(task="class", augment="style")
    (report_dir / "results.json").write_text(json.dumps(report))
    rr.main(["--report", str(report_dir), "--out", str(out), "--img-dir",
             str(tmp_path / "img")])
    assert "; task class, augment style\n" in out.read_text()


def test_machine_and_training_time_come_from_the_recorded_runs(tmp_path):
    report_dir, report = _report(tmp_path)
    for run in report["runs"]:
        run["training"] = {"train_seconds": 10.0 + run["seed"]}
        run["machine"] = {"gpu": "NVIDIA H100 80GB HBM3", "cpu_count": 16,
                          "processor": "x86_64", "torch": "2.11.0+cu130"}
    (report_dir / "results.json").write_text(json.dumps(report))
    assert rr.training_times(report).startswith("random 11 s, erm 11 s")
    out = tmp_path / "RESULTS.md"
    rr.main(["--report", str(report_dir), "--out", str(out), "--img-dir",
             str(tmp_path / "img")])
    assert ("- machine: NVIDIA H100 80GB HBM3, 16 CPU cores (x86_64), torch 2.11.0+cu130 "
            "(recorded with each run)") in out.read_text()


def test_a_report_inside_the_docs_tree_is_linked_not_copied(tmp_path):
    docs = tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    report_dir, _ = _report(docs / "results")
    rr.main(["--report", str(report_dir), "--out", str(docs / "RESULTS.md"),
             "--img-dir", str(docs / "img")])
    assert "![pd32 heatmap.png](results/pd32/heatmap.png)" in (docs / "RESULTS.md").read_text()
    assert not (docs / "img").exists() or not any((docs / "img").iterdir())


def test_space_steps_are_judged_against_the_raw_embedding_seed_by_seed(tmp_path):
    _, report = _report(tmp_path)
    report["config"]["spaces"] = ["l2"]
    for run in report["runs"]:
        base = run["variants"]["plain"]["ood"]["KNN"]["pooled"] * 100
        shift = 10 if run["algorithm"] == "erm" else -5
        run["variants"]["space:l2"] = {"ood": _cells(base + shift)}
    text = "\n".join(rr.spaces_section(report))
    assert "| ERM | raw | 61.0 ± 1.0 |" in text
    assert "| ERM | l2 | 71.0 ± 1.0 | 71.0 ± 1.0 |" in text and "| holds |" in text
    assert "| Fish | l2 | 66.0 ± 1.0 |" in text and "| does not hold |" in text
    assert rr.spaces_section({"config": {"algorithms": ["erm"]}, "runs": []}) == []


def test_comparisons_pair_the_pretrainings_seed_by_seed(tmp_path):
    """IRM - ERM per seed: +1, -2, +1.5 (mean +0.17, sample std 1.89), whatever order
    the runs were written in; env-aware pretrainings are compared in every space."""
    _, report = _report(tmp_path)
    report["config"]["algorithms"].append("groupdro")
    report["runs"] += [{"algorithm": "groupdro", "seed": seed,
                        "variants": {"plain": {"ood": _cells(60 + 2 * seed)}}}
                       for seed in range(3)]
    report["runs"].sort(key=lambda run: (run["algorithm"] != "irm", -run["seed"]))
    claims = "\n".join(rr.claims(report))
    assert ("GroupDRO > ERM (not in the paper's Table 1): 62.0 ± 2.0 vs 61.0 ± 1.0 -> "
            "**direction only (gap within seed noise)** (paired +1.0 ± 1.0, ahead on 2 of 3 "
            "seeds)") in claims
    assert ("IRM > ERM: 61.2 ± 2.3 vs 61.0 ± 1.0 -> **direction only (gap within seed "
            "noise)** (paired +0.2 ± 1.9, ahead on 2 of 3 seeds)") in claims
    assert "EA-MoCo > MoCo v3: 81.0 ± 1.0 vs 66.0 ± 1.0 -> **holds** (paired +15.0 ± 0.0, " \
           "ahead on 3 of 3 seeds)" in claims
    report["config"]["spaces"] = ["l2"]
    for run in report["runs"]:
        run["variants"]["space:l2"] = {"ood": _cells(80 + run["seed"]
                                                     - (run["algorithm"] == "lisa"))}
    text = "\n".join(rr.spaces_section(report))
    assert "- LISA > ERM in space l2 (KNN): 80.0 ± 1.0 vs 81.0 ± 1.0 -> **does not hold** " \
           "(paired -1.0 ± 0.0, ahead on 0 of 3 seeds)" in text
    assert "- IRM > ERM in space raw (Mean AD)" in text
    assert rr.paired({0: 1.0}, {1: 2.0}) == "no common seed"


def test_a_sweep_is_placed_after_the_reports_with_its_algorithms_as_subsections(tmp_path):
    from envad.training.sweep import sweep_markdown

    report_dir, _ = _report(tmp_path)
    sweep_dir = tmp_path / "sweep-erm"
    sweep_dir.mkdir()
    point = {"label": "default", "point": {}, "run_dir": "r", "hparams": {"lr": 0.001},
             "val_acc": 0.97, "val_knn_acc": 0.95, "train_seconds": 700.0,
             "tail": {"epochs": 5, "min": 0.96, "max": 0.97}}
    summary = {"data": "pd", "size": 32, "seeds": [0], "device": "cpu",
               "recipe": {"algorithm": "*", "task": "class", "augment": "style",
                          "aux": "none", "epochs": 30, "hparams": {}, "space": "raw",
                          "detectors": [], "score_adaptation": "none"},
               "algorithms": {"erm": {"metric": "val_acc", "n_val": 480,
                                      "tie_tolerance": 0.009, "points": [point], "chosen": 0,
                                      "chosen_label": "default", "chosen_hparams": {},
                                      "changes_default": {}}}}
    (sweep_dir / "sweep.md").write_text(sweep_markdown(summary))
    out = tmp_path / "RESULTS.md"
    rr.main(["--report", str(report_dir), "--sweep", str(sweep_dir), "--out", str(out),
             "--img-dir", str(tmp_path / "img")])
    text = out.read_text()
    section = text[text.index("## Hyperparameter sweep (training-domain validation) "
                              "(sweep-erm)"):]
    assert text.index("## photodigits-32") < text.index(section)
    assert "\n### erm\n" in section and "\n## erm" not in section
    assert "| default | 97.0 | 95.0 | 96.0-97.0 (5) | 700 | **chosen** |" in section
    assert f"`{sweep_dir}/sweep.json`" in section


def test_two_reports_trained_differently_pair_up_seed_by_seed(tmp_path):
    """A class-task report against a bucket-task one: each pretraining's Mean AD in each
    space both were scored in, A - B per seed, under a heading naming what differs."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    class_dir, class_report = _report(tmp_path / "a")
    bucket_dir, bucket_report = _report(tmp_path / "b")
    class_report["config"].update(task="class", spaces=["l2", "pca_l2"])
    bucket_report["config"].update(spaces=["l2"])
    for report, shift in ((class_report, 20), (bucket_report, 0)):
        for run in report["runs"]:
            base = run["variants"]["plain"]["ood"]["KNN"]["pooled"] * 100
            run["variants"]["space:l2"] = {"ood": _cells(base + shift + run["seed"] * shift)}
            run["variants"]["space:pca_l2"] = {"ood": _cells(base)}
    (class_dir / "results.json").write_text(json.dumps(class_report))
    (bucket_dir / "results.json").write_text(json.dumps(bucket_report))
    text = rr.pair_section(class_dir, bucket_dir)
    assert text.startswith("## pd32 against pd32: task class against bucket\n")
    assert "| ERM | raw | 61.0 ± 1.0 | 61.0 ± 1.0 | paired +0.0 ± 0.0, ahead on 0 of 3 " \
           "seeds |" in text
    # l2: +20, +40, +60 over the bucket report's seeds
    assert "| ERM | l2 | 101.0 ± 21.0 | 61.0 ± 1.0 | paired +40.0 ± 20.0, ahead on 3 of 3 " \
           "seeds |" in text
    assert "pca_l2" not in text          # only the bucket report lacks it
    out = tmp_path / "RESULTS.md"
    rr.main(["--report", str(class_dir), "--report", str(bucket_dir), "--pair",
             f"{class_dir}:{bucket_dir}", "--out", str(out), "--img-dir", str(tmp_path / "img")])
    assert out.read_text().count("## pd32 against pd32: task class against bucket") == 1
    with pytest.raises(SystemExit):
        rr.main(["--report", str(class_dir), "--pair", str(class_dir), "--out", str(out)])
