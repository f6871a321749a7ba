"""Choosing KDE's bandwidth on the training cameras alone, on `envad select`'s folds.

    python -m envad.training.kde_bandwidth --data DIR [--runs-dir DIR] [--folds 3]
        [--epochs 30] [--factors 0.0625,0.125,0.25,0.5,1,2] [--out FILE.json]

(--out also writes FILE.md, the table.)

A fixed bandwidth (pyod's `KDE()`: 1.0) means something else in every space step: narrow
next to a raw embedding's distances, wide next to unit-length rows'. KDE's registry entry
takes a multiple of the fit rows' own spacing instead (`exact.neighbour_scale`, the
median distance to the 5th nearest other row); this command measures which multiple.

Each fold holds a training camera and a normal class out of training and fitting (the
folds and fold encoders of `envad select`, trained with the default pipeline's recipe and
reused when already trained). Per space step, the space is fitted on the fold's fit rows
and the held-out camera's normal images are scored by KDE at each factor, by KDE at
pyod's fixed 1.0 and by KNN (the reference it should not fall below); the held-out class
is the anomaly. The held-out camera is centred on its own mean where the space centres
per camera, as per-camera adaptation does once a camera has sent enough images (the
proxy of space_selection.py). Each fold is also scored on `envad select`'s archive sets
(selection.ARCHIVE_MIXES: the held-out camera's images with a small share of the held-out
class, in two sets as near-identical frames, one event per anomaly or one per frame), the
space and the detectors fitted on the fit rows plus the archive set, as `envad scan`
fits an archive, and each archive row scored without its own event, as Score scores fit
rows (server/detectors/leave_out.py). The factor with
the best criterion averaged over folds and spaces wins, the criterion being
`envad select`'s: the mean of the clean ROC-AUC and the archive ROC-AUC averaged over the
archive sets (ties: the smaller factor). No test camera and no anomaly image is read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from envad.pipeline import DEFAULT_PIPELINE, Pipeline
from envad.server.detectors.exact import ExactKDE, ExactKNN, neighbour_scale
from envad.server.detectors.geometry import CameraStats, parse_space
from envad.server.encoder import OnnxEncoder
from envad.training.data import load_dataset
from envad.training.evaluate import embed
from envad.training.metrics import roc_auc
from envad.training.run import ENCODER_FILE
from envad.training.selection import (
    QuerySet,
    archive_fit,
    archive_sets,
    clean_and_archive,
    fold_fit_indices,
    fold_query_indices,
    make_folds,
    train_fold,
)

FACTORS = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0)
SPACES = ("raw", "l2", "center_l2", "white_l2:0.001", "center_white_l2:0.001")
#: the rules besides the factors: pyod's fixed bandwidth and the KNN reference
FIXED = "fixed 1.0"
KNN = "KNN"


def rule_name(factor: float) -> str:
    return f"x{factor:g}"


def rule_aucs(ref: np.ndarray, q: np.ndarray, positive: np.ndarray,
              factors=FACTORS, leave_out: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[float, dict[str, float]]:
    """The rows' neighbour scale and {rule: ROC-AUC} of queries `q` against rows `ref`
    (both already in the space); `leave_out` (event code per query, per row of `ref`):
    each query scored without the rows of its event, as Score scores fit rows."""
    def auc(estimator) -> float:
        fitted = estimator.fit(ref)
        scores = (fitted.decision_function(q) if leave_out is None
                  else fitted.decision_function_leaving_out(q, *leave_out))
        return roc_auc(positive, scores)

    scale = neighbour_scale(ref - ref.mean(axis=0))
    row = {KNN: auc(ExactKNN(5)), FIXED: auc(ExactKDE(1.0))}
    for factor in factors:
        row[rule_name(factor)] = auc(ExactKDE(bandwidth=factor * scale))
    return scale, row


def score_rules(X_fit: np.ndarray, fit_envs: np.ndarray, query: np.ndarray, camera: str,
                positive: np.ndarray, spaces=SPACES, factors=FACTORS,
                archives: dict[str, QuerySet] | None = None) -> dict[str, dict]:
    """{space: {"neighbour_scale", "auc": {rule: ROC-AUC}}} of one fold's queries (one
    camera), with `archives` also {"archive": {mix: {rule: ROC-AUC}}}: each archive set
    scored against the fit rows plus itself."""
    stats = CameraStats(len(query), query.mean(axis=0))
    out: dict[str, dict] = {}
    for spec in spaces:
        space = parse_space(spec).fit(X_fit, fit_envs)
        ref, _ = space.transform(X_fit, fit_envs)
        q, _ = space.transform(query, np.full(len(query), camera), running=lambda env: stats)
        scale, row = rule_aucs(ref, q, positive, factors)
        out[spec] = {"neighbour_scale": scale, "auc": row}
        for mix, archive in (archives or {}).items():
            rows, envs, _, codes = archive_fit(X_fit, fit_envs, archive)
            fitted = parse_space(spec).fit(rows, envs)
            ref, _ = fitted.transform(rows, envs)   # the archive's rows last, as scored
            out[spec].setdefault("archive", {})[mix] = rule_aucs(
                ref, ref[len(X_fit):], archive.positive, factors,
                (codes[len(X_fit):], codes))[1]
    return out


def criterion(space: dict, rule: str) -> float:
    """`envad select`'s criterion for one fold and space: the mean of the clean ROC-AUC and
    the archive ROC-AUC averaged over the archive sets (the clean one alone without, or
    when no set held an anomaly)."""
    return clean_and_archive(space["auc"][rule],
                             [a[rule] for a in space.get("archive", {}).values()])


def choose_factor(folds: list[dict], factors=FACTORS) -> tuple[float, dict[str, float]]:
    """The factor with the best criterion averaged over folds and spaces (ties: smaller)."""
    means = {rule_name(f): float(np.mean([criterion(space, rule_name(f)) for fold in folds
                                          for space in fold["spaces"].values()]))
             for f in factors}
    best = max(sorted(factors), key=lambda f: (round(means[rule_name(f)], 6), -f))
    return best, means


def run(data: str, runs_dir: Path, *, n_folds: int = 3, seed: int = 0, size: int = 32,
        candidate: Pipeline = DEFAULT_PIPELINE, factors=FACTORS, spaces=SPACES,
        device: str = "cpu", progress: bool = True) -> dict:
    dataset = load_dataset(data)
    records = dataset.records
    folds = []
    for fold in tqdm(make_folds(dataset, n_folds, seed), desc="folds", disable=not progress):
        run_dir = train_fold(candidate, data, fold, runs_dir, seed=seed, size=size,
                             device=device, progress=progress)
        encoder = OnnxEncoder(run_dir / ENCODER_FILE)
        fit_idx, query_idx = fold_fit_indices(dataset, fold), fold_query_indices(dataset, fold)
        X_fit = embed(encoder, dataset, fit_idx).astype(np.float64)
        query = embed(encoder, dataset, query_idx).astype(np.float64)
        positive = np.array([records[i].label == fold.label for i in query_idx])
        archives = archive_sets(QuerySet(query, np.full(len(query), fold.env), positive),
                                fold.env, seed)
        folds.append({"fold": {"env": fold.env, "label": fold.label},
                      "n_fit": len(fit_idx), "n_query": len(query_idx),
                      "spaces": score_rules(X_fit, np.array([records[i].env for i in fit_idx]),
                                            query, fold.env, positive, spaces, factors,
                                            archives)})
    best, means = choose_factor(folds, factors)
    return {"data": data, "candidate": candidate.run_name(size, seed), "seed": seed,
            "factors": list(factors), "chosen_factor": best, "mean_auc": means, "folds": folds}


def _table(folds: list[dict], rules: list[str], value) -> list[str]:
    """Markdown rows: `value(space_result, rule)` x 100, mean over folds, per space and
    averaged over spaces."""
    lines = ["| space | " + " | ".join(rules) + " |", "|" + " --- |" * (len(rules) + 1)]
    columns: dict[str, list[float]] = {rule: [] for rule in rules}
    for spec in folds[0]["spaces"]:
        cells = []
        for rule in rules:
            mean = 100 * float(np.mean([value(f["spaces"][spec], rule) for f in folds]))
            columns[rule].append(mean)
            cells.append(f"{mean:.1f}")
        lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    lines.append("| **mean** | " + " | ".join(f"**{np.mean(columns[r]):.1f}**" for r in rules)
                 + " |")
    return lines


def format_table(result: dict) -> str:
    """Markdown: mean ROC-AUC (%) over the folds, per space and averaged over spaces:
    clean fits, then (when scored) each archive set and the criterion."""
    folds = result["folds"]
    first = folds[0]["spaces"][next(iter(folds[0]["spaces"]))]
    rules = list(first["auc"])
    lines = ["Clean fits (the fit rows hold no image of the held-out camera):", ""]
    lines += _table(folds, rules, lambda space, rule: space["auc"][rule])
    for mix in first.get("archive", {}):
        lines += ["", f"Archive {mix} (fitted on the fit rows plus the scored images):", ""]
        lines += _table(folds, rules, lambda space, rule, mix=mix: space["archive"][mix][rule])
    if first.get("archive"):
        lines += ["", "Criterion (clean + mean archive) / 2, which chooses the factor:", ""]
        lines += _table(folds, rules, criterion)
    return "\n".join(lines) + f"\n\nChosen factor: {result['chosen_factor']:g}\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder-format dataset")
    parser.add_argument("--runs-dir", type=Path, default=Path("var/kde-bandwidth/runs"),
                        help="where the fold encoders are kept (reused when trained)")
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=DEFAULT_PIPELINE.epochs,
                        help="fold encoders' epochs (default: the default pipeline's)")
    parser.add_argument("--factors", default=",".join(f"{f:g}" for f in FACTORS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="write the full result as JSON here")
    args = parser.parse_args(argv)
    factors = tuple(float(f) for f in args.factors.split(","))
    result = run(args.data, args.runs_dir, n_folds=args.folds, seed=args.seed,
                 size=args.size, factors=factors, device=args.device,
                 candidate=dataclasses.replace(DEFAULT_PIPELINE, epochs=args.epochs))
    table = format_table(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        args.out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
