"""curves.png of a training run, and what a run imports to draw it."""

from __future__ import annotations

import subprocess
import sys

from envad.training.curves import training_curves


def test_curves_are_drawn_for_trained_epochs_only(tmp_path):
    epochs = [{"epoch": 0, "val_knn_acc": 0.5},
              {"epoch": 1, "train": {"loss": 0.9}, "val_knn_acc": 0.6, "val_acc": 0.7},
              {"epoch": 2, "train": {"loss": 0.5}, "val_knn_acc": 0.8, "val_acc": 0.9}]
    path = training_curves(tmp_path / "curves.png", epochs, "erm, seed 0")
    assert path == tmp_path / "curves.png"
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert training_curves(tmp_path / "none.png", epochs[:1], "random") is None
    assert not (tmp_path / "none.png").exists()


def test_a_training_run_imports_neither_scipy_nor_matplotlib_even_to_draw_its_curves(
        tmp_path):
    code = ("import sys; from pathlib import Path; import envad.training.run; "
            "from envad.training.curves import training_curves; "
            "training_curves(Path(sys.argv[1]), [{'epoch': 1, 'train': {'loss': 1.0}, "
            "'val_acc': 0.5}], 'erm'); "
            "print(sorted(m for m in ('scipy', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "curves.png")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
