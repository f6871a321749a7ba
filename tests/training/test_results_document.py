"""docs/RESULTS.md is exactly what its quoted command makes of the committed reports."""

from __future__ import annotations

import shutil
from pathlib import Path

from envad.training import report_results

ROOT = Path(__file__).resolve().parents[2]


def test_results_md_regenerates_from_the_committed_reports(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "docs" / "results", tmp_path / "docs" / "results")
    monkeypatch.chdir(tmp_path)
    report_results.main(["--report", "docs/results/pd32", "--report", "docs/results/pd64",
                         "--report", "docs/results/pd32-default",
                         "--report", "docs/results/pd32-paper-spaces",
                         "--intro", "docs/results/intro.md", "--out", "docs/RESULTS.md"])
    assert (tmp_path / "docs" / "RESULTS.md").read_text() == \
        (ROOT / "docs" / "RESULTS.md").read_text()
