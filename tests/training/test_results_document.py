"""docs/RESULTS.md is exactly what its quoted command makes of the committed reports."""

from __future__ import annotations

import shutil
from pathlib import Path

from envad.training import report_results

ROOT = Path(__file__).resolve().parents[2]


def quoted_command() -> list[str]:
    """The arguments of the assembly command docs/results/intro.md quotes."""
    intro = (ROOT / "docs" / "results" / "intro.md").read_text()
    start = intro.index("`python -m envad.training.report_results")
    command = intro[start + 1:intro.index("`", start + 1)].split()
    return command[3:]


def test_results_md_regenerates_from_the_committed_reports(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "docs" / "results", tmp_path / "docs" / "results")
    monkeypatch.chdir(tmp_path)
    argv = quoted_command()
    assert argv.count("--report") >= 5 and argv[-2:] == ["--out", "docs/RESULTS.md"]
    report_results.main(argv)
    assert (tmp_path / "docs" / "RESULTS.md").read_text() == \
        (ROOT / "docs" / "RESULTS.md").read_text()
