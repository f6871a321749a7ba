"""`envad evaluate`: the pretrainings x detectors grid (the paper's Table 1) on a dataset."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from envad.arrival_orders import parse_orders
from envad.devices import DEVICE_HELP
from envad.errors import InvalidInput
from envad.pipeline import Pipeline, resolve_pipeline


def _list(value: str) -> list[str]:
    return [v for v in value.split(",") if v]


def register(subparsers) -> None:
    register_evaluate(subparsers)
    register_select(subparsers)
    register_sweep(subparsers)


def register_evaluate(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="reproduce the paper's Table 1: pretrainings x detectors ROC-AUC",
        description="Train (or reuse) one encoder per algorithm and seed, fit every detector "
                    "on the training cameras' normal images, score the unseen test cameras, "
                    "and write table.md, table.csv, results.json and PNG plots to --out. "
                    "Interrupted evaluations resume: finished (algorithm, seed) pairs are "
                    "kept in OUT/results/.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--data", required=True,
                        help="folder-format dataset DIR or iwildcam:ROOT")
    parser.add_argument("--algorithms", type=_list, default=None,
                        help="comma-separated algorithms (default: all registered)")
    parser.add_argument("--detectors", type=_list, default=None,
                        help="comma-separated detectors (default: the paper's eight; "
                             "with --pipeline, its detector set)")
    parser.add_argument("--seeds", type=lambda v: [int(s) for s in _list(v)], default=[0, 1, 2],
                        help="comma-separated seeds")
    parser.add_argument("--size", type=int, default=32, help="input size in px")
    parser.add_argument("--epochs", type=int, default=None,
                        help="training epochs per run (default: the pipeline's, else 5)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu", help=DEVICE_HELP)
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where trained runs are kept and reused (default OUT/runs)")
    parser.add_argument("--stylist-fractions", type=lambda v: [float(s) for s in _list(v)],
                        default=[0.0, 0.1, 0.25, 0.5],
                        help="candidate Stylist drop fractions, chosen on val ('' = off)")
    parser.add_argument("--pipeline", default=None,
                        help="evaluate one pipeline (default, paper, or a selection.json from "
                             "`envad select`): its training settings, detectors and space "
                             "step; --algorithms/--detectors/--epochs then default to it")
    parser.add_argument("--spaces", type=_list, default=None,
                        help="space steps to add as variants (raw, l2, pca_l2, style_l2:N, "
                             "center_l2, white_l2[:S], center_white_l2[:S]); default: the "
                             "pipeline's, else none")
    parser.add_argument("--score-adaptation", default=None,
                        help="score adaptation of the space variants: none, or camera, "
                             "median, gated[:P[:Z]] or frozen[:P[:N]] with an optional :P "
                             "prior in rows (each unseen camera's scores on the fit set's "
                             "scale; docs/detectors.md); default: the pipeline's, else none")
    parser.add_argument("--orders", default="all",
                        help="arrival orders each test camera is also scored in, "
                             "comma-separated (shuffled, normal-first, bursts-8, bursts-50, "
                             "spread-5%%, spread-20%%) or all; the report lists each and the "
                             "worst")
    parser.add_argument("--weights", default=None, metavar="FILE|imagenet",
                        help="also score these torchvision ResNet-18 weights frozen, "
                             "trained on nothing (the paper's 'Other dataset' column; the "
                             "pretraining frozen-pretrained): a local state-dict file, or "
                             "`imagenet` for torchvision's ImageNet weights (downloaded once "
                             "into $TORCH_HOME; offline, copy the file there or pass a FILE)")
    parser.add_argument("--no-plots", action="store_true",
                        help="write the tables and results.json only, no PNG plots (a "
                             "report that is merged later, as scripts/parallel_grid.sh's "
                             "per-seed ones)")
    parser.add_argument("--out", type=Path, required=True, help="report directory")
    parser.set_defaults(func=run)


def register_select(subparsers) -> None:
    parser = subparsers.add_parser(
        "select", help="choose a pipeline on the training cameras only",
        description="Pipeline selection without test cameras: each fold holds one training "
                    "camera and one normal class out of training, trains every candidate "
                    "on the rest, and scores the held-out camera with the held-out class as "
                    "the anomaly, for every space step and detector set. Writes "
                    "selection.json (the chosen pipeline, usable as "
                    "`envad evaluate --pipeline FILE`) and selection.md. Resumable.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--data", required=True, action="append",
                        help="folder-format dataset DIR; repeatable: every candidate is "
                             "scored on each dataset's folds and chosen by the mean over "
                             "all of them")
    parser.add_argument("--jobs", type=int, default=1,
                        help="folds trained and scored at once, each in its own process")
    parser.add_argument("--candidates", default=None,
                        help="JSON file {name: pipeline fields} (default: the built-in "
                             "candidates of training/selection.py)")
    parser.add_argument("--folds", type=int, default=3, help="(camera, class) folds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=32, help="input size in px")
    parser.add_argument("--device", default="cpu", help=DEVICE_HELP)
    parser.add_argument("--spaces", type=_list, default=None,
                        help="space steps to score (default: training/selection.py's "
                             "SPACE_CANDIDATES); a finished fold lacking one is re-scored "
                             "with its cached encoder")
    parser.add_argument("--fit-rows", type=int, default=None,
                        help="fit the detectors on a seeded sample of this many of each "
                             "fold's fit rows (default: all): how the pipeline does with "
                             "few normal images")
    parser.add_argument("--score-adaptations", type=_list, default=None,
                        help="score adaptations to choose among (default: "
                             "training/selection.py's SCORE_ADAPTATION_CANDIDATES); a "
                             "finished fold lacking one is re-scored with its cached "
                             "encoder")
    parser.add_argument("--detectors", type=_list, default=None,
                        help="comma-separated detectors fitted and chosen among, alone and "
                             "as ensembles (default: every registered one); fewer take "
                             "less time, and a finished fold scored by more is reused")
    parser.add_argument("--out", type=Path, required=True, help="selection directory")
    parser.set_defaults(func=run_select)


def register_sweep(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep", help="choose each algorithm's hyperparameters on the training cameras' val",
        description="Per-algorithm hyperparameter sweep chosen by training-domain "
                    "validation (DomainBed's rule): each algorithm is trained at each of "
                    "its sweep points (training/sweep.py's SWEEP_POINTS, the current "
                    "default first) with the pipeline's recipe and judged on the "
                    "training cameras' val split at the last epoch (classifier accuracy; "
                    "k-NN accuracy for self-supervised algorithms); another point "
                    "replaces the default only when it beats it by more than the val "
                    "split's sampling error. Test cameras are never read. Writes "
                    "sweep.json and sweep.md; runs are reused and resumed.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--data", required=True,
                        help="folder-format dataset DIR or iwildcam:ROOT (needs a val split)")
    parser.add_argument("--algorithms", type=_list, default=None,
                        help="comma-separated algorithms (default: every swept one)")
    parser.add_argument("--pipeline", default="default",
                        help="the training recipe the points share (default, paper, or a "
                             "selection.json)")
    parser.add_argument("--points", type=Path, default=None,
                        help="JSON file {algorithm: [{hparam: value}, ...]}, the default "
                             "{} first (default: training/sweep.py's SWEEP_POINTS)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="epochs per run (default: the pipeline's)")
    parser.add_argument("--seeds", type=lambda v: tuple(int(s) for s in _list(v)),
                        default="0", help="comma-separated seeds; each point is judged "
                                           "on its mean over them")
    parser.add_argument("--size", type=int, default=32, help="input size in px")
    parser.add_argument("--device", default="cpu", help=DEVICE_HELP)
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs trained at once, each in its own process (on a GPU "
                             "several small runs share it well; on a CPU they split its "
                             "cores)")
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where trained runs are kept and reused (default OUT/runs; "
                             "var/demo/runs reuses the demo's run of the default point)")
    parser.add_argument("--out", type=Path, required=True, help="sweep directory")
    parser.set_defaults(func=run_sweep)


def run(args) -> int:
    # imported when a command runs, not when the CLI is built: the CLI (and its --help)
    # must start without torch (algorithms, evaluate) or the server's dependencies
    from envad.server.detectors.registry import PAPER_DETECTORS
    from envad.server.detectors.registry import names as detector_names
    from envad.server.detectors.score_adaptation import parse_score_adaptation
    from envad.training.algorithms import names as algorithm_names
    from envad.training.evaluate import EvalConfig, run_evaluation
    from envad.training.pretrained import resolve_weights

    try:
        weights = resolve_weights(args.weights)
    except ValueError as exc:       # `imagenet` offline: the one line `envad train` gives
        raise InvalidInput(str(exc)) from None
    training: dict[str, Any] = {}
    algorithms = args.algorithms or algorithm_names()
    detectors = args.detectors or list(PAPER_DETECTORS)
    spaces = args.spaces or []
    adaptation = args.score_adaptation or "none"
    epochs = args.epochs or 5
    if args.pipeline:
        pipeline = resolve_pipeline(args.pipeline)
        training = {"task": pipeline.task, "augment": pipeline.augment, "aux": pipeline.aux,
                    "hparams": dict(pipeline.hparams)}
        algorithms = args.algorithms or [pipeline.algorithm]
        detectors = args.detectors or list(pipeline.detectors) or detector_names()
        spaces = args.spaces or ([pipeline.space] if pipeline.space != "raw" else [])
        adaptation = args.score_adaptation or pipeline.score_adaptation
        epochs = args.epochs or pipeline.epochs
    config = EvalConfig(
        data=args.data, algorithms=tuple(algorithms), detectors=tuple(detectors),
        seeds=tuple(args.seeds), out=args.out, size=args.size, epochs=epochs,
        batch_size=args.batch_size, device=args.device, runs_dir=args.runs_dir,
        stylist_fractions=tuple(args.stylist_fractions), spaces=tuple(spaces),
        score_adaptation=parse_score_adaptation(adaptation).spec(),
        orders=parse_orders(args.orders), weights=weights, plots=not args.no_plots,
        **training)
    out = run_evaluation(config)
    print((out / "table.md").read_text())
    plots = (", heatmap.png, mean_ad.png, roc.png, camera_histograms.png" if config.plots
             else "")
    print(f"report: {out}/table.md, table.csv, results.json{plots}")
    return 0


def run_select(args) -> int:
    # torch and scikit-learn ([train]): the CLI (and its --help) starts without them
    from envad.training.selection import (
        DEFAULT_CANDIDATES,
        SCORE_ADAPTATION_CANDIDATES,
        SPACE_CANDIDATES,
        run_selection,
    )

    candidates = DEFAULT_CANDIDATES
    if args.candidates:
        candidates = {name: Pipeline.from_json(fields) for name, fields in
                      json.loads(Path(args.candidates).read_text()).items()}
    data = args.data[0] if len(args.data) == 1 else args.data
    summary = run_selection(data, candidates, args.out, n_folds=args.folds,
                            seed=args.seed, size=args.size, device=args.device,
                            spaces=tuple(args.spaces or SPACE_CANDIDATES),
                            fit_rows=args.fit_rows, jobs=args.jobs,
                            score_adaptations=tuple(args.score_adaptations
                                                    or SCORE_ADAPTATION_CANDIDATES),
                            detectors=tuple(args.detectors or ()))
    print((Path(args.out) / "selection.md").read_text())
    print(f"chosen pipeline: {json.dumps(summary['chosen'])}")
    return 0


def run_sweep(args) -> int:
    # torch ([train]): the CLI (and its --help) starts without it
    from envad.training import sweep

    points = None
    if args.points:
        points = {name: tuple(values) for name, values in
                  json.loads(Path(args.points).read_text()).items()}
    algorithms = args.algorithms or list(points or sweep.SWEEP_POINTS)
    config = sweep.SweepConfig(data=args.data, out=args.out, algorithms=tuple(algorithms),
                               pipeline=resolve_pipeline(args.pipeline), size=args.size,
                               seeds=args.seeds, epochs=args.epochs, device=args.device,
                               runs_dir=args.runs_dir, points=points, jobs=args.jobs)
    summary = sweep.run_sweep(config)
    print((Path(args.out) / sweep.SWEEP_MD).read_text())
    for algorithm, result in summary["algorithms"].items():
        print(f"{algorithm}: {result['chosen_label']}")
    return 0
