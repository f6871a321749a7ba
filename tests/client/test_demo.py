"""The whole demo (`make demo`) in a temporary workdir: minutes, so marked slow."""

from __future__ import annotations

import json

import pytest

from envad.client.demo import run_demo


@pytest.mark.slow
def test_demo_end_to_end(tmp_path) -> None:
    report = run_demo(tmp_path / "demo", epochs=1)
    assert report["n_test_images"] == 900 and report["n_anomalies"] == 360
    detectors = {"IsoForest", "INNE", "LODA", "OCSVM", "PCA", "LOF5", "KNN", "KDE", "ensemble"}
    assert set(report["roc_auc"]) == detectors
    assert all(0.0 <= v <= 1.0 for v in report["roc_auc"].values())
    assert (tmp_path / "demo" / "roc.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "demo" / "report.json").read_text()) == report
    assert "stopped" in (tmp_path / "demo" / "server.log").read_text()
