"""The review loop: how labelling the top false alarms `normal` changes the ranking.

A generated camera-trap archive (`review_archive`): three cameras, each with its own
background; most images show the common content (a dark animal on the background), a
rarer normal content at each camera (a bright glare over the upper half) and a few
images of new content (a bright striped object); images come as events of one to three
near-identical frames. Every image is embedded by an envad encoder (default: the
demo's, var/demo/models/encoder.onnx), the detectors are fitted on the whole archive
(as `envad scan` and an archive backfill do), every image is scored (its own event left
out, leave_out.py), the k highest-scored normal images are labelled `normal` and the
detectors refitted: the review memory (server/detectors/reviewed.py) keeps them and
their events. Then the lowest-scored image of new content is labelled `anomaly` too and
the detectors refitted again. The labels reach `fit_bundle` as the server's Fit passes
them (server/review.py: known anomalies as ANOMALY_LABEL, every row with its event), so
the bundle applies its own rules.

Printed per k, before and after: precision of the top 30 (new content among the 30
highest ensemble scores), the ROC-AUC of the images left unlabelled, how many labelled
images and frames of their events stay at or above the threshold, and for the labelled
images of the glare content (`glare_labelled`; with the demo encoder the top false
alarms are mostly outliers of the common content, the glare only sometimes among them)
the other glare images at their cameras: how many, how many flagged, their mean ensemble
(None when no glare image was labelled). Then the image labelled new content's score
before and after its label, and the unlabelled ROC-AUC after it.

    python -m benchmarks.review_loop --k 3 10
"""

from __future__ import annotations

import argparse
import io
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from benchmarks.common import emit

DEMO_ENCODER = Path("var/demo/models/encoder.onnx")
SIZE = 32
BACKGROUNDS = {"cam-a": (60, 95, 50), "cam-b": (110, 85, 60), "cam-c": (80, 90, 110)}
COMMON, GLARE, NEW = "common", "glare", "new"
FIRST_SHOT = datetime(2024, 6, 1, 6, 0, 0)


@dataclass
class Archive:
    """Images (uint8 NHWC) with their camera, kind, event and capture time."""

    images: np.ndarray
    envs: np.ndarray
    kinds: np.ndarray
    events: np.ndarray
    times: list[datetime]

    def png(self, row: int) -> bytes:
        from PIL import Image

        out = io.BytesIO()
        Image.fromarray(self.images[row]).save(out, format="PNG")
        return out.getvalue()


def _scene(rng: np.random.Generator, background, kind: str) -> np.ndarray:
    image = np.array(background, float) + rng.normal(0, 14, (SIZE, SIZE, 3))
    y, x = rng.integers(6, SIZE - 6, size=2)
    yy, xx = np.mgrid[:SIZE, :SIZE]
    if kind == NEW:
        box = (abs(yy - y) < 6) & (abs(xx - x) < 8)
        stripes = (xx // 2 % 2).astype(bool)
        image[box & stripes] = (240, 230, 40)
        image[box & ~stripes] = (30, 30, 200)
    else:
        image[(yy - y) ** 2 + (xx - x) ** 2 < 20] *= 0.35
        if kind == GLARE:
            image[: SIZE // 2] = image[: SIZE // 2] * 0.3 + 190
    return image


def review_archive(per_camera: int = 100, glare: float = 0.1, new: float = 0.05,
                   seed: int = 0) -> Archive:
    """The generated archive above: `per_camera` events per camera, a fraction `glare`
    of them the rare normal content, `new` of them new content."""
    rng = np.random.default_rng(seed)
    images, envs, kinds, events, times = [], [], [], [], []
    shot = FIRST_SHOT
    for env, background in BACKGROUNDS.items():
        for n in range(per_camera):
            draw = rng.random()
            kind = NEW if draw < new else GLARE if draw < new + glare else COMMON
            scene = _scene(rng, background, kind)
            for frame in range(int(rng.integers(1, 4))):
                noisy = scene + rng.normal(0, 4, scene.shape)
                images.append(np.clip(noisy, 0, 255).astype(np.uint8))
                envs.append(env)
                kinds.append(kind)
                events.append(f"{env}-{n}")
                times.append(shot + timedelta(seconds=2 * frame))
            shot += timedelta(minutes=10)
    return Archive(np.stack(images), np.array(envs), np.array(kinds), np.array(events), times)


def embed(archive: Archive, model: Path) -> np.ndarray:
    from envad.server.encoder import OnnxEncoder

    return np.asarray(OnnxEncoder(model).embed(archive.images), dtype=np.float32)


def fit_and_score(X, archive: Archive, labels: np.ndarray, detectors=None):
    """Fit on every row with its label (their groups: the archive's events), as the
    server's Fit does, then score every row with its id; (ensemble, threshold)."""
    from envad.server.detectors.bundle import FitSpec, fit_bundle
    from envad.server.detectors.leave_out import FitGroups

    ids = np.array([f"row{i:05d}" for i in range(len(X))])
    codes = np.unique(archive.events, return_inverse=True)[1]
    groups = FitGroups.of_members(ids, codes, 60.0)
    spec = FitSpec(detectors=tuple(detectors) if detectors else (), seed=0)
    bundle = fit_bundle(X, spec, envs=archive.envs, labels=labels.astype(str), ids=ids,
                        groups=groups)
    scores = bundle.score(X, envs=archive.envs, ids=ids)
    return scores.ensemble, bundle.threshold


def precision_at(ensemble: np.ndarray, truth: np.ndarray, n: int = 30) -> float:
    return float(truth[np.argsort(-ensemble, kind="stable")[:n]].mean())


def measure(X, archive: Archive, k: int, detectors=None) -> dict:
    """The figures of the module docstring for labelling the k top false alarms."""
    from sklearn.metrics import roc_auc_score

    truth = archive.kinds == NEW
    none = np.full(len(X), "", dtype=object)
    before, threshold_before = fit_and_score(X, archive, none, detectors)
    # the k top false alarms, one per event (a reviewer sees one frame of a burst)
    chosen, seen = [], set()
    for row in np.argsort(-before, kind="stable"):
        if not truth[row] and archive.events[row] not in seen:
            chosen.append(row)
            seen.add(archive.events[row])
        if len(chosen) == k:
            break
    labels = none.copy()
    labels[chosen] = "normal"
    after, threshold_after = fit_and_score(X, archive, labels, detectors)
    unlabelled = labels == ""
    mates = np.isin(archive.events, archive.events[chosen]) & unlabelled
    glare = [r for r in chosen if archive.kinds[r] == GLARE]
    same_content = (archive.kinds == GLARE) & ~np.isin(archive.events, archive.events[chosen]) \
        & np.isin(archive.envs, archive.envs[glare])
    return {
        "k": k, "images": len(X), "new_content": int(truth.sum()),
        "precision_top30_before": precision_at(before, truth),
        "precision_top30_after": precision_at(after, truth),
        "auc_unlabelled_before": float(roc_auc_score(truth[unlabelled], before[unlabelled])),
        "auc_unlabelled_after": float(roc_auc_score(truth[unlabelled], after[unlabelled])),
        "labelled_flagged_before": int((before[chosen] >= threshold_before).sum()),
        "labelled_flagged_after": int((after[chosen] >= threshold_after).sum()),
        "event_frames": int(mates.sum()),
        "event_frames_flagged_after": int((after[mates] >= threshold_after).sum()),
        "glare_labelled": len(glare), "same_content": int(same_content.sum()),
        "same_content_flagged_before": int((before[same_content] >= threshold_before).sum()),
        "same_content_flagged_after": int((after[same_content] >= threshold_after).sum()),
        "same_content_mean_before": _mean(before[same_content]),
        "same_content_mean_after": _mean(after[same_content]),
        **_new_content_labelled(X, archive, labels, after, detectors),
    }


def _mean(scores: np.ndarray) -> float | None:
    return float(scores.mean()) if len(scores) else None


def _new_content_labelled(X, archive: Archive, labels: np.ndarray, after: np.ndarray,
                          detectors=None) -> dict:
    """Label the lowest-scored image of new content `anomaly` (the worst case) and
    refit: its score before and after, and the unlabelled ROC-AUC after."""
    from sklearn.metrics import roc_auc_score

    truth = archive.kinds == NEW
    new = int(np.flatnonzero(truth)[np.argmin(after[truth])])
    labels = labels.copy()
    labels[new] = "anomaly"
    rescored, threshold = fit_and_score(X, archive, labels, detectors)
    unlabelled = labels == ""
    event = (archive.events == archive.events[new]) & unlabelled
    return {
        "new_content_before": float(after[new]), "new_content_after": float(rescored[new]),
        "new_content_flagged_after": bool(rescored[new] >= threshold),
        "new_content_event_frames": int(event.sum()),
        "new_content_event_flagged_after": int((rescored[event] >= threshold).sum()),
        "auc_unlabelled_after_new_label": float(roc_auc_score(truth[unlabelled],
                                                              rescored[unlabelled])),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[3, 10])
    parser.add_argument("--model", type=Path, default=DEMO_ENCODER)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args(argv)
    for seed in args.seeds:
        archive = review_archive(seed=seed)
        X = embed(archive, args.model)
        for k in args.k:
            record = measure(X, archive, k)
            emit({"benchmark": "review_loop", "model": str(args.model), "seed": seed,
                  **record})


if __name__ == "__main__":
    main()
