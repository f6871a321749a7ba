"""A training run's curves.png: losses and validation accuracy per epoch.

Kept apart from the evaluation plots (training/plots.py) so that a training run imports
neither scipy nor matplotlib before it has an epoch to draw.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from envad.training.run_files import VAL_METRICS


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def training_curves(path: Path, epochs: list[dict], title: str) -> Path | None:
    """Per-epoch training losses and validation accuracies of a run (its run.json
    `epochs`), so a reader sees whether validation plateaued. None when there is no
    trained epoch."""
    trained = [e for e in epochs if e.get("epoch", 0) > 0]
    if not trained:
        return None
    plt = pyplot()
    x = [e["epoch"] for e in trained]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key in sorted({k for e in trained for k in e.get("train", {})}):
        left.plot(x, [e["train"].get(key, np.nan) for e in trained], marker="o", label=key)
    left.set(xlabel="epoch", ylabel="mean training loss", title="training")
    left.legend(fontsize=8)
    for key in VAL_METRICS:
        if any(key in e for e in trained):
            right.plot(x, [e.get(key, np.nan) for e in trained], marker="o", label=key)
    right.set(xlabel="epoch", ylabel="accuracy", ylim=(0, 1.01),
              title="validation (training cameras)")
    right.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
