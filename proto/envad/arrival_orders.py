"""The orders in which a camera's images reach the service.

New content does not reach a camera trap one frame at a time, shuffled among normal
frames: it comes in runs (a herd passing for an hour, a vehicle parked for a week, a new
species that stays). Anything that learns from a camera's stream (the per-camera score
adaptation) can be fooled by a run, so evaluations score each camera in several orders
and a pipeline is judged by its worst:

- `shuffled`: the images in a seeded random order;
- `normal-first`: every normal image, then every image of new content;
- `bursts-8`, `bursts-50`: new content in runs of 8 or 50 consecutive frames, the runs
  at seeded random places among the normal images;
- `spread-5%`, `spread-20%`: new content thinned to 5% or 20% of the camera's images,
  evenly spread over time.

An order is a function of the camera's labels and a seed: it returns the positions of
the images in arrival order (the `spread` orders keep a subset). Cameras are kept apart:
`arrange` orders each camera on its own and lists the cameras one after another (the
adaptation keeps statistics per camera, so how cameras interleave does not matter).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from envad.errors import InvalidInput

Order = Callable[[np.ndarray, np.random.Generator], np.ndarray]
ORDERS: dict[str, Order] = {}


def order(name: str) -> Callable[[Order], Order]:
    """Register an order under `name` (a name registered twice is an error)."""
    def register(fn: Order) -> Order:
        if name in ORDERS:
            raise ValueError(f"arrival order {name!r} registered twice")
        ORDERS[name] = fn
        return fn
    return register


@order("shuffled")
def shuffled(positive: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(len(positive))


@order("normal-first")
def normal_first(positive: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.concatenate([rng.permutation(np.flatnonzero(~positive)),
                           rng.permutation(np.flatnonzero(positive))])


def in_runs(positive: np.ndarray, rng: np.random.Generator, run: int) -> np.ndarray:
    """New content in runs of `run` consecutive frames (the last run shorter), each run
    placed at a seeded random gap between normal frames."""
    normals = rng.permutation(np.flatnonzero(~positive))
    anomalies = rng.permutation(np.flatnonzero(positive))
    runs = [anomalies[i:i + run] for i in range(0, len(anomalies), run)]
    gaps = np.sort(rng.integers(0, len(normals) + 1, size=len(runs)))
    parts, start = [], 0
    for gap, frames in zip(gaps, runs, strict=True):
        parts += [normals[start:gap], frames]
        start = gap
    parts.append(normals[start:])
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def spread(positive: np.ndarray, rng: np.random.Generator, share: float) -> np.ndarray:
    """New content thinned to `share` of the images (as many as there are, at most),
    at evenly spaced places among the normal frames."""
    normals = rng.permutation(np.flatnonzero(~positive))
    anomalies = rng.permutation(np.flatnonzero(positive))
    wanted = int(round(share / (1.0 - share) * len(normals)))
    anomalies = anomalies[:max(1, min(wanted, len(anomalies)))] if len(anomalies) else anomalies
    total = len(normals) + len(anomalies)
    places = np.zeros(total, dtype=bool)
    if len(anomalies):
        places[np.floor((np.arange(len(anomalies)) + 0.5) * total / len(anomalies)
                        ).astype(np.int64)] = True
    out = np.empty(total, dtype=np.int64)
    out[places], out[~places] = anomalies, normals
    return out


for _run in (8, 50):
    order(f"bursts-{_run}")(partial(in_runs, run=_run))
for _share in (0.05, 0.2):
    order(f"spread-{round(_share * 100)}%")(partial(spread, share=_share))

DEFAULT_ORDERS = tuple(ORDERS)


def parse_orders(text: str | None) -> tuple[str, ...]:
    """A comma-separated list of order names (all of them when empty or `all`)."""
    if not text or text == "all":
        return DEFAULT_ORDERS
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in ORDERS]
    if unknown:
        raise InvalidInput(f"unknown arrival order(s) {', '.join(unknown)}: use "
                         f"{', '.join(ORDERS)} or all")
    return names


def arrange(envs: np.ndarray, positive: np.ndarray, name: str, seed: int) -> np.ndarray:
    """Positions of the rows in arrival order `name`: each camera ordered on its own
    (seeded by the seed and the camera's place), the cameras one after another."""
    envs, positive = np.asarray(envs).astype(str), np.asarray(positive, dtype=bool)
    parts = []
    for place, env in enumerate(np.unique(envs)):
        rows = np.flatnonzero(envs == env)
        rng = np.random.default_rng([seed, place, 41])
        parts.append(rows[ORDERS[name](positive[rows], rng)])
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)
