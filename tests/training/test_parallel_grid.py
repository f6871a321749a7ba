"""scripts/parallel_grid.sh: one evaluate process per seed, merged into one report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "parallel_grid.sh"


def test_per_seed_reports_merge_into_one(tiny_photodigits, tmp_path):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               THREADS="1")
    out = tmp_path / "grid"
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tiny_photodigits), "32", str(out), "0 1",
         "--algorithms", "random", "--detectors", "KNN,PCA", "--stylist-fractions", ""],
        capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    for seed in (0, 1):
        assert (tmp_path / f"grid-s{seed}" / "results" / f"random-s{seed}.json").is_file()
        assert not list((tmp_path / f"grid-s{seed}").glob("*.png"))  # the merged one plots
    assert (out / "roc.png").is_file() and (out / "heatmap.png").is_file()
    report = json.loads((out / "results.json").read_text())
    assert sorted((r["algorithm"], r["seed"]) for r in report["runs"]) == [
        ("random", 0), ("random", 1)]
    assert "random" in (out / "table.md").read_text()


def test_usage_without_arguments():
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 2 and "parallel_grid.sh DATA SIZE OUT" in done.stdout


def test_one_process_per_pretraining_and_seed(tiny_photodigits, tmp_path):
    """ALGORITHMS: a process of its own for each pretraining (and seed, as above: one
    seed here, each process starts an evaluation that imports torch)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               THREADS="1", ALGORITHMS="random")
    out = tmp_path / "grid"
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tiny_photodigits), "32", str(out), "1",
         "--detectors", "KNN", "--stylist-fractions", ""],
        capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "random, seed 1: pid" in done.stdout
    assert sorted(p.name for p in (tmp_path / "grid-random-s1" / "results").glob("*.json")) \
        == ["random-s1.json"]
    assert not (tmp_path / "grid-s1").exists()
    report = json.loads((out / "results.json").read_text())
    assert report["config"]["algorithms"] == ["random"]
    assert [(r["algorithm"], r["seed"]) for r in report["runs"]] == [("random", 1)]
