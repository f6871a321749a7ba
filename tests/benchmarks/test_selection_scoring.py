"""benchmarks.selection_scoring on a small fold: the shipped scoring of the pooled sets and
the reference agree (the benchmark checks it before timing) and both are timed."""

from __future__ import annotations

import json

from benchmarks import selection_scoring


def test_a_small_fold_is_scored_both_ways_with_the_same_aucs(capsys):
    assert selection_scoring.main(["--dim", "8", "--fit", "150", "--rows", "40", "--sets",
                                   "1", "--rounds", "1"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()
                 if line.startswith("{")]
    assert record["benchmark"] == "selection_scoring" and record["detector_sets"] == 511
    assert record["shipped_s"] > 0 and record["reference_s"] > 0
