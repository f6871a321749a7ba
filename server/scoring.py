"""The Score path after the encoder, run once per micro-batch for every request in it.

The micro-batcher (batching.py) embeds the images of all Score requests queued together
in one ONNX Runtime call and hands the embeddings of each request, with its `ScoreJob`,
to `BatchScorer`: the detector bundle scores all rows at once (one call per bundle in the
batch), and neighbours are searched once per distinct neighbour query. A row's scores do
not depend on the other rows of its batch (every detector scores row by row), and
scoring changes no state: the per-camera statistics that camera-aware spaces and score
adaptation read are built from stored rows only (ModelSpace.observe_stored), so no Score
call can move another caller's scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from envad.records import Neighbor, RowFilter
from envad.server.detectors.bundle import BundleScores, DetectorBundle
from envad.server.detectors.registry import unchecked_estimators
from envad.server.env_stats import EnvStatistics
from envad.server.index import SelfKey, VectorIndex


@dataclass(frozen=True)
class ScoreJob:
    """What to do with the embeddings of one request's images (one entry per image)."""

    bundle: DetectorBundle
    envs: tuple[str, ...]
    top_k: int
    neighbor_filter: RowFilter
    ids: tuple[str, ...] = ()     # the images' ids (a fit row's own group is left out)
    exclude_labels: tuple[str, ...] = ()
    self_keys: tuple[SelfKey, ...] | None = None   # set: the image's own row is no evidence

    def rows(self, start: int, stop: int) -> ScoreJob:
        """The same job for images start..stop (a request split across micro-batches)."""
        keys = None if self.self_keys is None else self.self_keys[start:stop]
        return replace(self, envs=self.envs[start:stop], ids=self.ids[start:stop],
                       self_keys=keys)


@dataclass(frozen=True)
class ScoredRows:
    """One job's result: its embeddings, scores and neighbours, row by row."""

    vectors: np.ndarray
    scores: BundleScores
    neighbors: list[list[Neighbor]]

    @staticmethod
    def concat(parts: Sequence[ScoredRows]) -> ScoredRows:
        if len(parts) == 1:
            return parts[0]
        return ScoredRows(np.concatenate([p.vectors for p in parts]),
                          BundleScores.concat([p.scores for p in parts]),
                          [hits for p in parts for hits in p.neighbors])


class BatchScorer:
    """The batcher's stage for Score: detectors and neighbour search of a micro-batch."""

    def __init__(self, index: VectorIndex, camera_stats: EnvStatistics,
                 score_statistics: Callable[[DetectorBundle], EnvStatistics | None]):
        self.index = index
        self.camera_stats = camera_stats
        self.score_statistics = score_statistics   # a bundle's per-camera score statistics

    def __call__(self, jobs: Sequence[tuple[np.ndarray, ScoreJob]]) -> list[ScoredRows]:
        scores = self._scores(jobs)
        neighbors = self._neighbors(jobs)
        return [ScoredRows(vectors, scores[i], neighbors[i])
                for i, (vectors, _) in enumerate(jobs)]

    def _scores(self, jobs: Sequence[tuple[np.ndarray, ScoreJob]]) -> list[BundleScores]:
        """One bundle call per bundle in the batch (a Fit may activate another mid-way)."""
        out: list[BundleScores | None] = [None] * len(jobs)
        groups: dict[int, list[int]] = {}
        for i, (_, job) in enumerate(jobs):
            groups.setdefault(id(job.bundle), []).append(i)
        for members in groups.values():
            bundle = jobs[members[0]][1].bundle
            X = np.concatenate([jobs[i][0] for i in members])
            envs = [env for i in members for env in jobs[i][1].envs]
            ids = [row_id for i in members for row_id in jobs[i][1].ids]
            with unchecked_estimators():
                scored = bundle.score(X, envs, self.camera_stats.get,
                                      self.score_statistics(bundle),
                                      ids if len(ids) == len(X) else None)
            start = 0
            for i in members:
                stop = start + len(jobs[i][0])
                out[i] = scored.rows(start, stop)
                start = stop
        return [s for s in out if s is not None]

    def _neighbors(self, jobs: Sequence[tuple[np.ndarray, ScoreJob]]
                   ) -> list[list[list[Neighbor]]]:
        """One index search per distinct neighbour query (filter, exclusions), at the
        largest k asked for; each job keeps its own top_k."""
        out: list[list[list[Neighbor]]] = [[] for _ in jobs]
        groups: dict[tuple, list[int]] = {}
        for i, (_, job) in enumerate(jobs):
            key = (job.neighbor_filter, job.exclude_labels, job.self_keys is None)
            groups.setdefault(key, []).append(i)
        for (row_filter, labels, keep_self), members in groups.items():
            X = np.concatenate([jobs[i][0] for i in members])
            keys = None if keep_self else [k for i in members for k in jobs[i][1].self_keys or ()]
            k = max(jobs[i][1].top_k for i in members)
            hits = self.index.search(X, k, row_filter, exclude_labels=labels, exclude_self=keys)
            start = 0
            for i in members:
                stop = start + len(jobs[i][0])
                top_k = jobs[i][1].top_k
                out[i] = [row[:top_k] for row in hits[start:stop]]
                start = stop
        return out
