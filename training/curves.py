"""A training run's curves.png: losses and validation accuracy per epoch, drawn with
matplotlib, imported when a run draws its curves. The figure is a bare
`matplotlib.figure.Figure`, which renders with the Agg canvas and touches neither pyplot's
global state nor a display."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from envad.training.run_files import VAL_METRICS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: the two panels' titles, left to right
PANEL_TITLES = ("training", "validation (training cameras)")
#: a longer series is a line without markers
MAX_MARKED_POINTS = 60


def training_curves(path: Path, epochs: list[dict], title: str) -> Path | None:
    """Per-epoch training losses and validation accuracies of a run (its run.json
    `epochs`) drawn to `path`, so a reader sees whether validation plateaued. None when
    there is no trained epoch."""
    figure = curves_figure(epochs, title)
    if figure is None:
        return None
    path = Path(path)
    figure.savefig(path, dpi=100)
    return path


def curves_figure(epochs: list[dict], title: str) -> Figure | None:
    """The figure `training_curves` saves: a panel of losses, one of validation
    accuracies (`VAL_METRICS` present in the run), epoch 0 (before training) left out,
    a missing value a gap. None when there is no trained epoch."""
    trained = [e for e in epochs if e.get("epoch", 0) > 0]
    if not trained:
        return None
    from matplotlib.figure import Figure  # matplotlib: the train extra, loaded when drawn

    x = [int(e["epoch"]) for e in trained]
    losses = {key: [float(e.get("train", {}).get(key, "nan")) for e in trained]
              for key in sorted({k for e in trained for k in e.get("train", {})})}
    accuracies = {key: [float(e.get(key, "nan")) for e in trained]
                  for key in VAL_METRICS if any(key in e for e in trained)}
    figure = Figure(figsize=(11, 4))
    axes = figure.subplots(1, 2)
    for ax, panel_title, series, ylabel in zip(
            axes, PANEL_TITLES, (losses, accuracies), ("mean training loss", "accuracy"),
            strict=True):
        for name, values in series.items():
            ax.plot(x, values, marker="o" if len(x) <= MAX_MARKED_POINTS else None,
                    markersize=3, label=name)
        ax.set(title=panel_title, xlabel="epoch", ylabel=ylabel)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(loc="best", fontsize=8)
    axes[1].set_ylim(0.0, 1.01)
    figure.suptitle(title)
    figure.tight_layout()
    return figure
