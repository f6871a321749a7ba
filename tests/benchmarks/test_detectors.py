"""benchmarks/detectors.py: one record per detector, with the fit with events beside the
plain fit (times are reported, never asserted)."""

from __future__ import annotations

from benchmarks import detectors


def test_a_record_times_the_fit_with_events_for_both_kinds_of_leave_out():
    for name in ("KNN", "OCSVM"):
        record = detectors.run(name, 300, 8, 20, seed=0, reference=False)
        assert record["detector"] == name and record["n_reference"] == 300
        assert record["fit_seconds_envad_with_events"] > 0
        assert record["fit_ratio_with_events_over_without"] > 0
        assert "fit_seconds_pyod" not in record
