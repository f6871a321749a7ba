"""A training run's curves.png: losses and validation accuracy per epoch.

Drawn with Pillow (training/line_chart.py), which decoding already imports: a training
run imports neither scipy nor matplotlib, whose import alone cost a short run 0.45 s.
"""

from __future__ import annotations

from pathlib import Path

from envad.training.line_chart import Panel, draw_panels
from envad.training.run_files import VAL_METRICS


def training_curves(path: Path, epochs: list[dict], title: str) -> Path | None:
    """Per-epoch training losses and validation accuracies of a run (its run.json
    `epochs`), so a reader sees whether validation plateaued. None when there is no
    trained epoch."""
    trained = [e for e in epochs if e.get("epoch", 0) > 0]
    if not trained:
        return None
    x = [float(e["epoch"]) for e in trained]
    losses = {key: (x, [float(e.get("train", {}).get(key, "nan")) for e in trained])
              for key in sorted({k for e in trained for k in e.get("train", {})})}
    accuracies = {key: (x, [float(e.get(key, "nan")) for e in trained])
                  for key in VAL_METRICS if any(key in e for e in trained)}
    return draw_panels(path, [
        Panel("training", "epoch", "mean training loss", losses),
        Panel("validation (training cameras)", "epoch", "accuracy", accuracies,
              ylim=(0.0, 1.01)),
    ], title)
