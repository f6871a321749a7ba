"""Merging reports scored alike: the merged report is the one evaluation would write."""

from __future__ import annotations

import json
import shutil

import pytest

from envad.errors import InvalidInput
from envad.training.evaluate import run_evaluation
from envad.training.merge_reports import main, merge_reports


def split_report(out, tmp_path):
    """The smoke report cut in two: one report per pretraining, as two commands of the
    same evaluation would have left them (results, score arrays, references)."""
    whole = json.loads((out / "results.json").read_text())
    parts = []
    for algorithm in whole["config"]["algorithms"]:
        part = tmp_path / f"only-{algorithm}"
        (part / "results").mkdir(parents=True)
        runs = [r for r in whole["runs"] if r["algorithm"] == algorithm]
        config = {**whole["config"], "algorithms": [algorithm]}
        (part / "results.json").write_text(json.dumps({**whole, "config": config,
                                                       "runs": runs}))
        shutil.copy(out / "results" / f"{algorithm}-s0.npz", part / "results")
        shutil.copy(out / "references.json", part)
        parts.append(part)
    return parts


def test_the_merged_report_is_the_one_evaluation_would_write(smoke_report_copy, tmp_path):
    config, out = smoke_report_copy
    run_evaluation(config, progress=False)      # table.md as the evaluation writes it
    parts = split_report(out, tmp_path)
    merged = merge_reports(parts, tmp_path / "merged", config.data)
    assert (merged / "table.md").read_text() == (out / "table.md").read_text()
    assert (merged / "table.csv").read_text() == (out / "table.csv").read_text()
    assert json.loads((merged / "results.json").read_text()) == \
        json.loads((out / "results.json").read_text())
    for plot in ("heatmap.png", "mean_ad.png", "roc.png", "camera_histograms.png"):
        assert (merged / plot).stat().st_size > 0, plot


def test_a_merged_report_resumes_as_a_finished_evaluation(smoke_report, tmp_path,
                                                          monkeypatch):
    import dataclasses

    import envad.training.evaluate as evaluate

    config, out = smoke_report
    merged = merge_reports(split_report(out, tmp_path), tmp_path / "merged", config.data)

    def must_not_run(*args, **kwargs):
        raise AssertionError("a merged run was evaluated again")

    monkeypatch.setattr(evaluate, "evaluate_run", must_not_run)
    run_evaluation(dataclasses.replace(config, out=merged), progress=False)


def test_reports_without_score_arrays_merge_without_the_plots_that_need_them(
        smoke_report, tmp_path, capsys):
    config, out = smoke_report
    parts = split_report(out, tmp_path)
    for part in parts:
        for arrays in (part / "results").glob("*.npz"):
            arrays.unlink()
    main(["--report", str(parts[0]), "--report", str(parts[1]), "--data", config.data,
          "--out", str(tmp_path / "merged")])
    merged = tmp_path / "merged"
    assert f"wrote {merged}" in capsys.readouterr().out
    assert (merged / "heatmap.png").is_file() and (merged / "mean_ad.png").is_file()
    assert not (merged / "roc.png").exists() and not (merged / "camera_histograms.png").exists()
    assert (merged / "table.md").read_text() == (out / "table.md").read_text()


def test_reports_scored_differently_are_refused(smoke_report, tmp_path):
    config, out = smoke_report
    parts = split_report(out, tmp_path)
    other = json.loads((parts[1] / "results.json").read_text())
    other["config"]["spaces"] = ["l2"]
    (parts[1] / "results.json").write_text(json.dumps(other))
    with pytest.raises(InvalidInput, match="spaces"):
        merge_reports(parts, tmp_path / "merged", config.data)
    assert not (tmp_path / "merged").exists()


def test_one_run_in_two_reports_is_refused(smoke_report, tmp_path):
    config, out = smoke_report
    parts = split_report(out, tmp_path)
    again = shutil.copytree(parts[0], tmp_path / "random-again")
    with pytest.raises(InvalidInput, match="random seed 0 is in both"):
        merge_reports([parts[0], parts[1], again], tmp_path / "merged", config.data)
    with pytest.raises(InvalidInput, match="named twice"):
        merge_reports([parts[0], parts[1], parts[0]], tmp_path / "merged", config.data)


def test_reports_scored_with_other_detector_settings_are_refused(smoke_report, tmp_path):
    config, out = smoke_report
    parts = split_report(out, tmp_path)
    for part in parts:
        report = json.loads((part / "results.json").read_text())
        report["config"]["detector_settings"]["KNN"]["params"]["n_neighbors"] = 7
        (part / "results.json").write_text(json.dumps(report))
    with pytest.raises(InvalidInput, match="detector_settings"):
        merge_reports(parts, tmp_path / "merged", config.data)


def test_fewer_than_two_reports_or_a_folder_without_results_are_refused(tmp_path):
    with pytest.raises(InvalidInput, match="at least two"):
        merge_reports([tmp_path], tmp_path / "merged")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises(InvalidInput, match="no results.json"):
        merge_reports([tmp_path / "a", tmp_path / "b"], tmp_path / "merged")


def test_a_results_file_that_is_not_a_report_is_refused_by_name(tmp_path):
    for name, text in (("broken", "{not json"), ("other", '{"runs": []}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(text)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput, match="broken/results.json: not JSON"):
        merge_reports([tmp_path / "broken", tmp_path / "empty"], tmp_path / "merged")
    with pytest.raises(InvalidInput, match="other/results.json: not the results.json"):
        merge_reports([tmp_path / "other", tmp_path / "empty"], tmp_path / "merged")
