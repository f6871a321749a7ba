"""`envad select`'s scoring of one fold's pooled sets: every score adaptation and every
detector set, as shipped against the straightforward way, in the same run.

For each pooled set a fold scores (training/selection.py, `score_fold`), every score
adaptation scores the set as a stream and every subset of the detectors gets its
ROC-AUC. As shipped, the detectors run once per set and each adaptation re-scales their
raw scores (`DetectorBundle.score_stream(known=...)`) in a copy of the bundle that shares
its calibrations (`DetectorBundle.adapting`), each subset's mean is its prefix's sum plus
one member, and all subsets' AUCs come from one ranking (`roc_auc_columns`). The
reference runs the detectors again for every adaptation, in a plain copy of the bundle,
takes each subset's mean with np.mean and ranks every subset on its own (`roc_auc` per
column). Both give the same
AUCs (checked first). Data: seeded Gaussian classes in `--dim` dimensions, `--fit` fit
rows over three cameras, `--sets` pooled sets of `--rows` rows from two new cameras.

    python -m benchmarks.selection_scoring --rounds 3
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from benchmarks.common import emit, log
from envad.server.detectors import registry
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.detectors.score_adaptation import parse_score_adaptation
from envad.training import selection
from envad.training.metrics import roc_auc


def reference_aucs(names, scores, positive) -> dict[str, float]:
    """Each detector and every detector set ranked on its own."""
    row = {name: roc_auc(positive, scores.adapted[name]) for name in names}
    for combo in selection.detector_sets(names):
        ensemble = np.mean([scores.calibrated[n] for n in combo], axis=0)
        row[selection.ENSEMBLE_PREFIX + "+".join(combo)] = roc_auc(positive, ensemble)
    return row


def score_sets(bundle, names, sets, shipped: bool) -> list[dict]:
    out = []
    for X, envs, positive in sets:
        known = bundle.score_stream(X, envs) if shipped else None
        for spec in selection.SCORE_ADAPTATION_CANDIDATES:
            adaptation = parse_score_adaptation(spec)
            adapted = (bundle.adapting(adaptation) if shipped
                       else replace(bundle, score_adaptation=adaptation))
            scores = adapted.score_stream(X, envs, known=known)
            aucs = (selection._scorer_aucs(names, scores, positive) if shipped
                    else reference_aucs(names, scores, positive))
            out.append(aucs)
    return out


def make_data(args):
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=3.0, size=(4, args.dim))
    X_fit = np.concatenate([c + rng.normal(size=(args.fit // 3, args.dim)) for c in centres[:3]])
    fit_envs = np.array(["a", "b", "c"] * (len(X_fit) // 3))
    sets = []
    for _ in range(args.sets):
        normal = centres[rng.integers(0, 3, args.rows)] + rng.normal(size=(args.rows, args.dim))
        new = centres[3] + rng.normal(size=(args.rows // 4, args.dim))
        X = np.concatenate([normal, new]) + 0.5
        positive = np.r_[np.zeros(len(normal), bool), np.ones(len(new), bool)]
        order = rng.permutation(len(X))
        envs = np.where(rng.random(len(X)) < 0.5, "d", "e")
        sets.append((X[order], envs, positive[order]))
    return X_fit, fit_envs, sets


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--fit", type=int, default=1200)
    parser.add_argument("--rows", type=int, default=240)
    parser.add_argument("--sets", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    X_fit, fit_envs, sets = make_data(args)
    names = registry.names()
    bundle = fit_bundle(X_fit, FitSpec(space="white_l2:0.001", seed=0, detectors=tuple(names)),
                        envs=fit_envs)
    if score_sets(bundle, names, sets[:1], True) != score_sets(bundle, names, sets[:1], False):
        raise SystemExit("the shipped and the reference scoring disagree")
    best = {True: float("inf"), False: float("inf")}
    for round_ in range(args.rounds):
        for shipped in (True, False):
            start = time.perf_counter()
            score_sets(bundle, names, sets, shipped)
            best[shipped] = min(best[shipped], time.perf_counter() - start)
        log(f"round {round_ + 1}: shipped {best[True]:.2f} s, reference {best[False]:.2f} s")
    emit({"benchmark": "selection_scoring", "sets": args.sets, "rows": args.rows,
          "adaptations": len(selection.SCORE_ADAPTATION_CANDIDATES),
          "detector_sets": len(selection.detector_sets(names)),
          "shipped_s": best[True], "reference_s": best[False],
          "speedup": best[False] / best[True]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
