"""ROC-AUC per detector from a backfill's JSONL scores, as a table and a ROC-curve plot.

Truth comes from the source (`source.is_anomaly` of the folder format); anomalies are
the positive class, scores are the detectors' raw scores (higher = more anomalous).
Reported per detector: the pooled ROC-AUC over all scored images, and the mean of the
per-camera ROC-AUCs (cameras with both classes only), as in docs/BENCHMARK protocol.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envad.client.training_bridge import load_folder_dataset

ENSEMBLE = "ensemble"


@dataclass(frozen=True)
class DatasetFacts:
    """What the demo's description says about the dataset it ran on."""

    name: str
    normal_labels: tuple[str, ...]     # the labels of the training cameras' normal images
    train_cameras: int
    test_images: int
    test_cameras: int
    test_anomalies: int
    anomaly_labels: tuple[str, ...]    # the labels of the test images that are anomalies


def dataset_facts(data: str | Path) -> DatasetFacts:
    """The facts of a folder-format dataset (read with the training reader)."""
    dataset = load_folder_dataset(data)
    train = [r for r in dataset.records if r.split in ("train", "val")]
    test = [r for r in dataset.records if r.split == "test"]
    return DatasetFacts(
        name=dataset.name,
        normal_labels=_sorted_labels(r.label for r in train if not r.is_anomaly),
        train_cameras=len({r.env for r in train}), test_images=len(test),
        test_cameras=len({r.env for r in test}),
        test_anomalies=sum(r.is_anomaly for r in test),
        anomaly_labels=_sorted_labels(r.label for r in test if r.is_anomaly))


def _sorted_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """Distinct labels, numbers in numeric order first, then the others."""
    distinct = set(labels)
    return tuple(sorted(distinct, key=lambda x: (not x.isdigit(), int(x) if x.isdigit() else 0,
                                                  x)))


def describe_measurement(facts: DatasetFacts) -> str:
    """The paragraph printed above the demo's tables: what was fitted and scored."""
    share = round(100 * facts.test_anomalies / facts.test_images) if facts.test_images else 0
    return (
        f"What this measures: detectors are fit on embeddings of normal images (labels "
        f"{', '.join(facts.normal_labels)}) from the {facts.train_cameras} training cameras "
        f"of {facts.name}, then score the {facts.test_images} images of the "
        f"{facts.test_cameras} cameras never seen in training ({facts.test_anomalies} of "
        f"them, {share}%, anomalies: labels {', '.join(facts.anomaly_labels) or 'none'}). "
        "ROC-AUC: 0.5 = chance, 1.0 = perfect; anomalies are the "
        "positive class. 'per camera' averages the ROC-AUC of each unseen camera. "
        "'ensemble' is the bundle's mean calibrated score. 'with space' scores in the "
        "pipeline's space step with its score adaptation (each camera's scores on the fit "
        "set's scale); 'raw' in the encoder's raw output, unadapted (the paper's setting), "
        "both with the same encoder.")


@dataclass(frozen=True)
class ScoredSet:
    """Scores of the images that have a known truth and were scored."""

    truth: np.ndarray            # bool, True = anomaly
    envs: np.ndarray             # str
    scores: dict[str, np.ndarray]  # detector (and "ensemble") -> score per image
    ids: tuple[str, ...] = ()    # each image's stored id, when read from a score file

    def truth_by_id(self) -> dict[str, bool]:
        """id -> is new content."""
        return {row_id: bool(t) for row_id, t in zip(self.ids, self.truth, strict=True)}


@dataclass(frozen=True)
class AucRow:
    detector: str
    pooled: float
    per_camera_mean: float


def load_scores(path: str | Path) -> ScoredSet:
    """Read a JSONL score file written by `envad backfill --scores-out`."""
    truth, envs, rows = [], [], []
    with Path(path).open() as f:
        for line in f:
            record = json.loads(line)
            label = (record.get("source") or {}).get("is_anomaly")
            if record.get("status") != "ok" or label is None or not record.get("detectors"):
                continue
            truth.append(bool(label))
            envs.append(record.get("env", ""))
            rows.append(record)
    if not rows:
        raise ValueError(f"{path}: no scored image with a known truth (source.is_anomaly)")
    names = list(rows[0]["detectors"])
    if any("adapted" not in r["detectors"][n] for r in rows for n in names):
        raise ValueError(f"{path}: scores of an unknown older format (a detector's score "
                         "without `adapted`): rerun the demo (`make demo`) or the backfill "
                         "that wrote them")
    # a detector ranks by its score on the fit set's scale for the image's camera
    scores = {n: np.array([r["detectors"][n]["adapted"] for r in rows], dtype=float)
              for n in names}
    scores[ENSEMBLE] = np.array([r["ensemble"] for r in rows], dtype=float)
    return ScoredSet(np.array(truth), np.array(envs, dtype=object), scores,
                     tuple(str(r.get("id", "")) for r in rows))


def auc_table(scored: ScoredSet) -> list[AucRow]:
    """Pooled and per-camera-mean ROC-AUC for every detector and the ensemble."""
    from sklearn.metrics import roc_auc_score  # scikit-learn: an extra (server)

    if scored.truth.all() or not scored.truth.any():
        raise ValueError("ROC-AUC needs both normal and anomalous images")
    rows = []
    for name, values in scored.scores.items():
        per_camera = [
            roc_auc_score(scored.truth[mask], values[mask])
            for env in np.unique(scored.envs)
            for mask in [scored.envs == env]
            if 0 < scored.truth[mask].sum() < mask.sum()
        ]
        rows.append(AucRow(name, float(roc_auc_score(scored.truth, values)),
                           float(np.mean(per_camera)) if per_camera else float("nan")))
    return rows


def format_table(rows: Iterable[AucRow]) -> str:
    lines = [f"{'detector':<12} {'ROC-AUC':>8} {'mean per camera':>16}"]
    lines += [f"{r.detector:<12} {r.pooled:>8.3f} {r.per_camera_mean:>16.3f}" for r in rows]
    return "\n".join(lines)


def format_comparison(with_space: list[AucRow], raw: list[AucRow], space: str) -> str:
    """Side by side: each detector's ROC-AUC with the space step and in raw space."""
    raw_by_name = {r.detector: r for r in raw}
    head = f"with space {space}"
    lines = [f"{'':<12} {head:^26} {'raw (paper)':^26}",
             f"{'detector':<12} {'ROC-AUC':>12} {'per camera':>12}  {'ROC-AUC':>12} "
             f"{'per camera':>12}"]
    for r in with_space:
        other = raw_by_name.get(r.detector)
        lines.append(f"{r.detector:<12} {r.pooled:>12.3f} {r.per_camera_mean:>12.3f}  "
                     + (f"{other.pooled:>12.3f} {other.per_camera_mean:>12.3f}" if other
                        else f"{'-':>12} {'-':>12}"))
    return "\n".join(lines)


def plot_roc(scored: ScoredSet, rows: list[AucRow], path: str | Path, title: str) -> Path:
    """ROC curves of every detector (pooled over cameras) in one PNG."""
    import matplotlib  # matplotlib: an extra (train)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed
    from sklearn.metrics import roc_curve  # scikit-learn: an extra (server)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    auc = {r.detector: r.pooled for r in rows}
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for name, values in scored.scores.items():
        fpr, tpr, _ = roc_curve(scored.truth, values)
        ax.plot(fpr, tpr, lw=2.5 if name == ENSEMBLE else 1.2,
                ls="-" if name == ENSEMBLE else "--", label=f"{name} ({auc[name]:.3f})")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title=title,
           xlim=(0, 1), ylim=(0, 1.01))
    ax.legend(loc="lower right", fontsize=8, title="detector (ROC-AUC)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
