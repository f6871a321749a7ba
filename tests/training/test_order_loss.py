"""training/order_loss.py: the cold start and the statistics of a stream, told apart."""

from __future__ import annotations

import numpy as np
import pytest

from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.training.order_loss import WAYS, format_losses, main, order_losses


def _stream(seed: int = 0):
    """Fit rows of two cameras around content centres; one new camera whose style moves
    every image far (normal or not), 180 normal images and 120 of a new content."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 3.0, (3, 8))
    fit = np.concatenate([centres[rng.integers(0, 2, 400)] + rng.normal(0, 1, (400, 8))])
    fit_envs = np.array(["a", "b"] * 200)
    normals = centres[rng.integers(0, 2, 180)] + rng.normal(0, 1, (180, 8))
    new = centres[2] + rng.normal(0, 1, (120, 8))
    X = np.concatenate([normals, new]) + 6.0          # the new camera's style
    labels = np.concatenate([np.zeros(180, bool), np.ones(120, bool)])
    return fit, fit_envs, X, labels, np.array(["new"] * 300)


def _bundle(fit, fit_envs, adaptation: str):
    return fit_bundle(fit, FitSpec(detectors=("KNN",), seed=0, space="raw",
                                   score_adaptation=adaptation), envs=fit_envs)


def test_the_cold_start_is_what_normal_first_costs_within_a_camera():
    fit, fit_envs, X, labels, envs = _stream()
    unadapted = order_losses(_bundle(fit, fit_envs, "none"), X, labels, envs,
                             ("shuffled", "normal-first"))
    adapted = order_losses(_bundle(fit, fit_envs, "frozen:64"), X, labels, envs,
                           ("shuffled", "normal-first"))
    reference = unadapted["shuffled"]["streamed"]["per_camera_mean"]
    for ways in (*unadapted.values(), *adapted.values()):
        assert set(ways) == set(WAYS)
        # one increasing map per camera: the camera's own ranking, whatever the order
        for way in ("complete", "normals only"):
            assert ways[way]["per_camera_mean"] == pytest.approx(reference)
    # without adaptation the order changes nothing; with it, normal images that come
    # first are scored before their camera has statistics and look new
    assert unadapted["normal-first"]["streamed"] == unadapted["shuffled"]["streamed"]
    first = adapted["normal-first"]
    assert first["streamed"]["per_camera_mean"] < reference - 0.05
    assert first["warm"]["per_camera_mean"] > first["streamed"]["per_camera_mean"]


def test_the_command_writes_one_row_per_adaptation_and_order(tmp_path, capsys):
    from envad.training.photodigits import generate
    from tests.tiny_encoder import build_tiny_encoder

    data = generate(tmp_path / "pd", 32, 0, progress=False, train_per_camera=20,
                    test_per_camera=10)
    model = tmp_path / "encoder.onnx"
    build_tiny_encoder(model, size=32)
    out = tmp_path / "losses.md"
    results = main(["--data", str(data), "--model", str(model), "--score-adaptations",
                    "none,frozen:64", "--orders", "shuffled,normal-first", "--out", str(out)])
    assert set(results) == {"none", "frozen:64"}
    assert all(set(r) == {"shuffled", "normal-first"} for r in results.values())
    table = out.read_text()
    assert table == capsys.readouterr().out
    assert len([line for line in table.splitlines() if line.startswith("| frozen:64 |")]) == 2
    assert format_losses(results, "t").startswith("# t\n")
