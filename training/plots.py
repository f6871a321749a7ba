"""PNG plots of an evaluation: grid heatmap, Mean AD with error bars, ROC curves, and
per-camera score histograms of normals vs anomalies."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from envad.training.metrics import roc_auc, roc_curve_points
from envad.training.protocol import ENSEMBLE, MEAN_AD, result_name


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported on first use."""
    import matplotlib  # matplotlib ([train]): loads only when an evaluation plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen
    return plt


def heatmap(path: Path, cells: dict, rows: list[str], algorithms: list[str]) -> None:
    plt = pyplot()
    values = np.array([[cells[(r, a)][0] * 100 for a in algorithms] for r in rows])
    fig, ax = plt.subplots(figsize=(1.2 * len(algorithms) + 2.5, 0.5 * len(rows) + 1.5))
    image = ax.imshow(values, cmap="viridis", aspect="auto", vmin=np.nanmin(values),
                      vmax=np.nanmax(values))
    ax.set_xticks(range(len(algorithms)), algorithms, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    for i in range(len(rows)):
        for j in range(len(algorithms)):
            ax.text(j, i, f"{values[i, j]:.1f}", ha="center", va="center", fontsize=8,
                    color="white")
    fig.colorbar(image, ax=ax, label="ROC-AUC (%)")
    ax.set_title("ROC-AUC on unseen cameras (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def variant_label(variant: str) -> str:
    """A result variant as a plot legend names it: the raw embedding, Stylist, or a space
    step with its score adaptation (`pca_l2+camera:64`)."""
    return {"plain": "embedding", "stylist": "+ Stylist"}.get(
        variant, variant.removeprefix("space:"))


def mean_ad_series(tables: dict, algorithms: list[str]) -> list[tuple[str, list, list]]:
    """(legend label, means in %, stds in %) of Mean AD on the unseen cameras (pooled), one
    series per variant the tables hold: raw embedding first, then Stylist, then each space
    step in the report's order."""
    variants = [v for v, split, metric in tables if split == "ood" and metric == "pooled"]
    variants.sort(key=lambda v: (v != "plain", v != "stylist"))   # stable: spaces keep order
    series = []
    for variant in variants:
        cells = tables[(variant, "ood", "pooled")]
        if not all((MEAN_AD, a) in cells for a in algorithms):
            continue
        series.append((variant_label(variant),
                       [cells[(MEAN_AD, a)][0] * 100 for a in algorithms],
                       [cells[(MEAN_AD, a)][1] * 100 for a in algorithms]))
    return series


def mean_ad_bars(path: Path, tables: dict, algorithms: list[str]) -> None:
    series = mean_ad_series(tables, algorithms)
    if not series:                      # no variant scored every pretraining: nothing to draw
        return
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(1.1, 0.35 * len(series)) * len(algorithms) + 2, 4))
    width = 0.8 / len(series)
    x = np.arange(len(algorithms))
    for k, (label, means, stds) in enumerate(series):
        ax.bar(x + k * width, means, width, yerr=stds, capsize=2, label=label)
    ax.set_xticks(x + width * (len(series) - 1) / 2, algorithms, rotation=30, ha="right")
    ax.axhline(50, color="grey", lw=0.8, ls="--")
    ends = [m + sign * s for _, means, stds in series for m, s in zip(means, stds, strict=True)
            for sign in (-1, 1)]
    ends = [e for e in ends if np.isfinite(e)] + [50.0]
    ax.set_ylim(max(min(ends) - 5, 0), min(max(ends) + 5, 100))  # the differences, not 0..100
    ax.set_ylabel("Mean AD ROC-AUC (%)")
    ax.set_title("Mean over detectors, unseen cameras (error bars: std over seeds)")
    ax.legend(fontsize=7, ncol=min(len(series), 3))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def roc_curves(path: Path, curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 5))
    for name, (labels, scores) in curves.items():
        fpr, tpr = roc_curve_points(labels, scores)
        ax.plot(fpr, tpr, label=f"{name} ({100 * roc_auc(labels, scores):.1f})")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title("Ensemble ROC on unseen cameras (first seed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def camera_histograms(path: Path, runs: dict[str, dict]) -> None:
    plt = pyplot()
    algorithms = list(runs)
    cameras = sorted(set(np.concatenate([r["envs"] for r in runs.values()])))
    fig, axes = plt.subplots(len(algorithms), len(cameras), squeeze=False,
                             figsize=(3 * len(cameras), 2.2 * len(algorithms)))
    for i, algorithm in enumerate(algorithms):
        data = runs[algorithm]
        for j, camera in enumerate(cameras):
            ax = axes[i][j]
            mask = data["envs"] == camera
            scores, labels = data["scores"][mask], data["labels"][mask]
            bins = np.linspace(0, 1, 21)
            ax.hist(scores[~labels], bins=bins, alpha=0.6, label="normal")
            ax.hist(scores[labels], bins=bins, alpha=0.6, label="anomaly")
            ax.set_title(f"{algorithm} · {camera}", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Ensemble score per unseen camera: normals vs anomalies (first seed)")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (2.2 * len(algorithms))))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_plots(out: Path, tables: dict, detectors: list[str], algorithms: list[str],
                results: list[dict]) -> None:
    heatmap(out / "heatmap.png", tables[("plain", "ood", "pooled")],
            detectors + [ENSEMBLE, MEAN_AD], algorithms)
    mean_ad_bars(out / "mean_ad.png", tables, algorithms)
    first = {}
    for algorithm in algorithms:
        seeds = sorted(r["seed"] for r in results if r["algorithm"] == algorithm)
        path = out / "results" / f"{result_name(algorithm, seeds[0])}.npz"
        if not path.is_file():      # a merged report of reports that kept no arrays
            continue
        archive = np.load(path)
        first[algorithm] = {"labels": archive["labels"], "envs": archive["envs"],
                            "scores": archive[f"score:{ENSEMBLE}"]}
    if not first:
        return
    roc_curves(out / "roc.png", {a: (d["labels"], d["scores"]) for a, d in first.items()})
    camera_histograms(out / "camera_histograms.png", first)
