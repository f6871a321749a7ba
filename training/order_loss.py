"""Where an arrival order costs the score adaptation: its cold start, or what it learns.

`envad evaluate` scores each test camera as a stream (DetectorBundle.score_stream): each
chunk with the statistics of the rows stored before it. An order can cost in two ways.
The cold start: a camera's first chunk has no statistics of its own, and its next ones
still lean on the prior, so the images that come first are scored off their camera's
scale (when they are all normal, as in `normal-first`, they look new). And the
statistics themselves: a run of new content among the rows they are built from. For
each arrival order this module tells them apart, for one encoder and one fitted
pipeline, by scoring the same stream four ways:

- `streamed`: as the stream scores it (what `envad evaluate` reports);
- `warm`: the same scores, each camera's first chunk left out of the ROC-AUC;
- `complete`: every image scored with the statistics its camera holds at the end of the
  stream (the same rows, new content included, but no cold start);
- `normals only`: with statistics of the camera's normal images alone (an oracle no
  stream has: what the statistics would be if new content never joined them).

Within one camera `complete` and `normals only` map every score by one increasing
function, so their per-camera ROC-AUC is the unadapted one; `streamed` below it is the
cost of the cold start. It reads the test cameras, as `envad evaluate` does, to explain
a report's numbers; nothing is chosen on it.

    python -m envad.training.order_loss --data DIR --model ENCODER.onnx \\
        [--pipeline default] [--score-adaptations frozen:64,frozen:64+unseen] [--out FILE.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from envad.arrival_orders import DEFAULT_ORDERS, arrange, parse_orders
from envad.defaults import FIT_MAX_SAMPLES
from envad.pipeline import resolve_pipeline
from envad.server.detectors import registry
from envad.server.detectors.bundle import STREAM_CHUNK, DetectorBundle, FitSpec, fit_bundle
from envad.server.detectors.score_adaptation import parse_score_adaptation
from envad.server.encoder import OnnxEncoder
from envad.server.env_stats import EnvStatistics
from envad.training.data import load_dataset
from envad.training.evaluate import embed
from envad.training.metrics import mean_per_camera_auc, roc_auc
from envad.training.protocol import fit_indices

WAYS = ("streamed", "warm", "complete", "normals only")


def _aucs(labels: np.ndarray, scores: np.ndarray, envs: np.ndarray) -> dict[str, float]:
    return {"pooled": roc_auc(labels, scores),
            "per_camera_mean": mean_per_camera_auc(labels, scores, envs)}


def _with_statistics(bundle: DetectorBundle, X: np.ndarray, envs: np.ndarray,
                     stored: np.ndarray) -> np.ndarray:
    """Ensemble scores of X with each camera's statistics built from the rows `stored`
    (a mask, in arrival order) before any is scored."""
    running = EnvStatistics(None, X.shape[1])
    running.update(envs[stored], X[stored])
    score_stats = bundle.new_score_statistics()
    bundle.observe(X[stored], envs[stored], running.get, score_stats)
    return bundle.score(X, envs, running.get, score_stats).ensemble


def order_losses(bundle: DetectorBundle, X: np.ndarray, labels: np.ndarray,
                 envs: np.ndarray, orders=DEFAULT_ORDERS, seed: int = 0
                 ) -> dict[str, dict[str, dict[str, float]]]:
    """{order: {way: {"pooled", "per_camera_mean"}}} for every way of WAYS, each
    camera's images in that arrival order (envad/arrival_orders.py, `seed`)."""
    envs = np.asarray(envs).astype(str)
    labels = np.asarray(labels, dtype=bool)
    out = {}
    for name in orders:
        rows = arrange(envs, labels, name, seed)
        Xo, yo, eo = X[rows], labels[rows], envs[rows]
        streamed = bundle.score_stream(Xo, eo).ensemble
        warm = np.concatenate([np.flatnonzero(eo == env)[STREAM_CHUNK:]
                               for env in np.unique(eo)])
        out[name] = {
            "streamed": _aucs(yo, streamed, eo),
            "warm": _aucs(yo[warm], streamed[warm], eo[warm]),
            "complete": _aucs(yo, _with_statistics(bundle, Xo, eo, np.ones(len(yo), bool)),
                              eo),
            "normals only": _aucs(yo, _with_statistics(bundle, Xo, eo, ~yo), eo)}
    return out


def format_losses(results: dict[str, dict], title: str) -> str:
    """Markdown: per score adaptation and arrival order, each way's pooled and mean
    per-camera ROC-AUC."""
    lines = [f"# {title}", "", "Pooled / mean per-camera ROC-AUC of each test camera's "
             f"stream (chunks of {STREAM_CHUNK}): `streamed` as scored; `warm` without each "
             "camera's first chunk; `complete` with the statistics each camera holds at "
             "the end of its stream; `normals only` with those of its normal images alone "
             "(an oracle). Reads the test cameras; nothing is chosen on it.", "",
             "| score adaptation | order | " + " | ".join(WAYS) + " |",
             "| --- | --- |" + " --- |" * len(WAYS)]
    for adaptation, by_order in results.items():
        for order, ways in by_order.items():
            cells = [f"{ways[w]['pooled']:.3f} / {ways[w]['per_camera_mean']:.3f}"
                     for w in WAYS]
            lines.append(f"| {adaptation} | {order} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m envad.training.order_loss",
        description="Split what each arrival order costs the score adaptation into its "
                    "cold start and its statistics, on a dataset's test cameras.")
    parser.add_argument("--data", required=True, help="folder-format dataset DIR")
    parser.add_argument("--model", required=True, type=Path, help="ONNX encoder file")
    parser.add_argument("--pipeline", default="default",
                        help="default, paper, or a selection.json: its space, detectors "
                             "and score adaptation")
    parser.add_argument("--score-adaptations", default="",
                        help="comma-separated adaptations (default: the pipeline's)")
    parser.add_argument("--orders", default="shuffled,normal-first",
                        help="comma-separated arrival orders, or all")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the arrival orders and the fit (an encoder's training "
                             "seed gives the orders `envad evaluate` scored it in)")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    pipeline = resolve_pipeline(args.pipeline)
    adaptations = [a for a in args.score_adaptations.split(",") if a] or [
        pipeline.score_adaptation]
    dataset = load_dataset(args.data)
    records, encoder = dataset.records, OnnxEncoder(args.model)
    fit_idx, test_idx = fit_indices(dataset), dataset.indices(split="test")
    measured = next((a for a in adaptations if parse_score_adaptation(a).unseen_prior),
                    "none")
    bundle = fit_bundle(embed(encoder, dataset, fit_idx), FitSpec(
        detectors=tuple(pipeline.detectors) or registry.PAPER_DETECTORS, seed=args.seed,
        max_samples=FIT_MAX_SAMPLES, space=pipeline.space, score_adaptation=measured),
        envs=np.array([records[i].env for i in fit_idx]))
    X = embed(encoder, dataset, test_idx)
    labels = np.array([records[i].is_anomaly for i in test_idx], dtype=bool)
    envs = np.array([records[i].env for i in test_idx])
    results = {a: order_losses(bundle.adapting(parse_score_adaptation(a)), X, labels, envs,
                               parse_orders(args.orders), args.seed) for a in adaptations}
    table = format_losses(results, f"Arrival orders: cold start and statistics "
                          f"({args.model.name}, {Path(args.data).name})")
    print(table, end="")
    if args.out:
        args.out.write_text(table)
    return results


if __name__ == "__main__":
    main()
