"""benchmarks.stylist_ranking on small sizes: both rankings are timed and agree."""

from __future__ import annotations

import json

import pytest

from benchmarks import stylist_ranking


def test_both_rankings_are_timed_and_agree(capsys):
    stylist_ranking.main(["--rows", "60", "90", "--cameras", "2", "3", "--dims", "12",
                          "--rounds", "1"])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["rows"], r["cameras"], r["dims"]) for r in records] == [(60, 2, 12), (90, 3, 12)]
    for record in records:
        assert record["benchmark"] == "stylist_ranking"
        assert record["scipy_s"] > 0 and record["envad_s"] > 0
        assert record["ratio_scipy_over_envad"] == record["scipy_s"] / record["envad_s"]
        assert record["max_abs_difference"] < 1e-12


def test_one_camera_count_per_size_is_required():
    with pytest.raises(SystemExit):
        stylist_ranking.main(["--rows", "60", "90", "--cameras", "2"])
