"""The demo's arrival-order rows: the served bundle scoring the unseen cameras as streams.

The demo's main table scores the unseen cameras as an archive (every image stored, then
fitted and scored, as the README's path does). A live camera sends its images over
time instead, and each image is scored with the statistics of the images stored before
it. These rows replay that with the served bundle (loaded from the server's data
directory) and the stored embeddings: each unseen camera's images in a seeded
`shuffled` order, and `normal-first` (every normal image, then all the new content, the
order that moves a camera's statistics most), through the same scoring code the server
runs for Score and for stored rows (DetectorBundle.score_stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envad.arrival_orders import arrange
from envad.client.demo_report import ScoredSet, auc_table

#: the orders the demo prints (envad/arrival_orders.py has more; `envad evaluate` runs all)
DEMO_ORDERS = ("shuffled", "normal-first")


@dataclass(frozen=True)
class OrderRow:
    order: str
    pooled: float
    per_camera_mean: float


def replay_orders(bundles_dir: Path, bundle_id: str, batches, truth: dict[str, bool],
                  seed: int, orders: tuple[str, ...] = DEMO_ORDERS) -> list[OrderRow]:
    """The ensemble's pooled and mean per-camera ROC-AUC of the stored rows in `batches`
    (Arrow record batches with id, env and vector) that have a truth, each camera's rows
    sent in each order."""
    # the server's scoring code, in this process: only the demo, which serves, loads it
    from envad.server.detectors.persistence import BundleStore
    from envad.server.store import vectors_of

    bundle = BundleStore(bundles_dir).load(bundle_id)
    ids, envs, vectors = [], [], []
    for batch in batches:
        ids += batch.column("id").to_pylist()
        envs += batch.column("env").to_pylist()
        vectors.append(vectors_of(batch))
    keep = np.array([row_id in truth for row_id in ids], dtype=bool)
    X = np.concatenate(vectors)[keep]
    ids_kept = np.array(ids, dtype=object)[keep]
    envs_kept = np.array(envs, dtype=object)[keep].astype(str)
    labels = np.array([truth[row_id] for row_id in ids_kept], dtype=bool)
    rows = []
    for name in orders:
        order = arrange(envs_kept, labels, name, seed)
        scores = bundle.score_stream(X[order], envs_kept[order]).ensemble
        (auc,) = auc_table(ScoredSet(labels[order], envs_kept[order], {"ensemble": scores}))
        rows.append(OrderRow(name, auc.pooled, auc.per_camera_mean))
    return rows


def format_orders(rows: list[OrderRow]) -> str:
    lines = [f"{'arrival order':<14} {'ROC-AUC':>8} {'mean per camera':>16}"]
    lines += [f"{r.order:<14} {r.pooled:>8.3f} {r.per_camera_mean:>16.3f}" for r in rows]
    return "\n".join(lines)
