"""`make demo`: the whole product on a multi-camera dataset, end to end.

PhotoDigits (32 px, built in) or any folder-format dataset (`--data DIR`) -> train an
encoder with the default pipeline (envad/pipeline.py) -> export ONNX -> start
`envad serve` -> backfill the training cameras -> fit the detectors with the pipeline's
space step -> score the unseen cameras -> ROC-AUC per detector, with the space step and
without it (raw embeddings, the paper's setting) -> ROC plot -> stop the server (also on
failure).

What it measures: how well detectors fit on embeddings of *normal* images from the
training cameras flag *new content* in images from cameras never seen in training,
whose style (background, lighting, noise) is new too. ROC-AUC 0.5 is chance; on
PhotoDigits BENCHMARK.md gives the floor (raw pixels, ~0.53) and ceiling (content
oracle, ~0.98) of the task.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.demo_orders import format_orders, replay_orders
from envad.client.demo_report import (
    ScoredSet,
    auc_table,
    dataset_facts,
    describe_measurement,
    format_comparison,
    format_table,
    load_scores,
    plot_roc,
)
from envad.client.fit_options import FitSettings
from envad.client.library import EnvadClient
from envad.client.results import RowFilter
from envad.client.server_process import LocalServer
from envad.client.sources import open_source
from envad.client.training_bridge import (
    export_encoder,
    generate_photodigits,
    select_pipeline,
    set_aside_stale_run,
    train_encoder,
)
from envad.devices import DEVICE_HELP, resolve_device
from envad.errors import InvalidInput
from envad.pipeline import DEFAULT_PIPELINE, Pipeline, resolve_pipeline


def log(message: str) -> None:
    print(f"[demo] {message}", flush=True)


@dataclass(frozen=True)
class SelectBudget:
    """`--select`: how much of `envad select` runs before the demo trains: the first
    `candidates` built-in candidates, each trained on `folds` leave-one-camera-out folds,
    scored in the space steps `spaces` (None: every one of the selection's) by the
    detectors `detectors` (None: every registered one)."""

    candidates: int = 4
    folds: int = 3
    spaces: tuple[str, ...] | None = None
    detectors: tuple[str, ...] | None = None


def run_demo(workdir: Path, *, data: Path | None = None, pipeline: Pipeline = DEFAULT_PIPELINE,
             epochs: int | None = None, algorithm: str | None = None, seed: int = 0,
             size: int = 32, fresh: bool = False, device: str = "auto",
             select: SelectBudget | None = None) -> dict:
    """Run every stage in `workdir`; returns the report (also written to report.json).

    `data`: a folder-format dataset (train/val splits of the training cameras, test split
    of unseen cameras); None generates PhotoDigits (deterministic) in the workdir.
    `epochs` and `algorithm` override the pipeline's. The training run lives in
    `workdir/runs/TRAINING-sSEED` (`-cuda` added when it trains on a GPU): a finished run
    with the same settings is reused, an interrupted one resumed; `fresh` deletes the
    whole workdir first. `device`: where the encoder trains (`auto`: the GPU when torch
    sees one). `select`: choose the pipeline first with `envad select` on the dataset's
    training cameras (in `workdir/select`, resumed), instead of `pipeline`.
    """
    overrides: dict[str, Any] = {k: v for k, v in (("epochs", epochs), ("algorithm", algorithm))
                                 if v}
    pipeline = replace(pipeline, **overrides)
    clock = _StageClock()
    _clear_workdir(workdir, fresh)
    with clock.stage("data"):
        data = _dataset(workdir, data, size, seed)
    if select is not None:
        with clock.stage("select"):
            pipeline = replace(_selected(workdir, data, select, epochs, size, seed, device),
                               **overrides)
    with clock.stage("train+export"):
        _train_and_export(workdir, data, pipeline, size, seed, resolve_device(device))
    outcome = _serve_and_score(workdir, data, pipeline, seed, clock)
    tables = {name: auc_table(outcome.scored[first]) for name, first in outcome.same_as.items()}
    plot = plot_roc(outcome.scored["pipeline"], tables["pipeline"], workdir / "roc.png",
                    f"unseen cameras ({pipeline.training_name}, space {pipeline.space})")
    report = _report(data, pipeline, seed, size, outcome, tables, plot, clock)
    (workdir / "report.json").write_text(json.dumps(report, indent=2))
    _print_summary(workdir, data, pipeline, outcome, tables, plot, clock.wall())
    return report


class _StageClock:
    """Wall seconds of each demo stage (the report's timings_s), logged as each ends."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        yield
        self.lap(name, t0)

    def lap(self, name: str, t0: float) -> None:
        self.timings[name] = round(time.monotonic() - t0, 1)
        log(f"{name}: {self.timings[name]:.1f}s")

    def wall(self) -> float:
        return time.monotonic() - self.started


@dataclass
class _Scored:
    """What the demo's server measured: each scoring pass's scores (by the first pass
    that fitted the same bundle: `same_as`) and the arrival orders' results."""

    scored: dict[str, ScoredSet]
    same_as: dict[str, str]
    orders: list


def _clear_workdir(workdir: Path, fresh: bool) -> None:
    """A fresh store, checkpoints and outputs on every run (results must not mix runs);
    with `fresh`, nothing of earlier runs at all."""
    if fresh:
        shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in (workdir / "data", workdir / "checkpoints"):
        shutil.rmtree(stale, ignore_errors=True)
    for name in ("scores.jsonl", "scores-raw.jsonl", "roc.png", "report.json", "server.log"):
        (workdir / name).unlink(missing_ok=True)


def _selected(workdir: Path, data: Path, budget: SelectBudget, epochs: int | None,
              size: int, seed: int, device: str) -> Pipeline:
    """The pipeline `envad select` chooses on the training cameras within `budget`."""
    log(f"selecting a pipeline on the training cameras: {budget.candidates} candidates x "
        f"{budget.folds} folds (test cameras not read) in {workdir / 'select'}")
    chosen = select_pipeline(data, workdir / "select", candidates=budget.candidates,
                             folds=budget.folds, epochs=epochs, seed=seed, image_size=size,
                             device=resolve_device(device), progress=False,
                             spaces=budget.spaces, detectors=budget.detectors)
    log(f"selected: {chosen.describe()} ({workdir / 'select' / 'selection.md'})")
    return chosen


def _space_list(text: str) -> tuple[str, ...] | None:
    """`--select-spaces`: comma-separated space steps the server knows (None: none named),
    checked as the flags are read, so a wrong name stops the demo at once."""
    # the server extra (the demo serves what it trains): not imported by the client library
    from envad.server.detectors.geometry import parse_space

    return _checked_names(text, parse_space)


def _detector_list(text: str) -> tuple[str, ...] | None:
    """`--select-detectors`: comma-separated registered detectors (None: none named),
    checked as the flags are read."""
    # the server extra (the demo serves what it trains): not imported by the client library
    from envad.server.detectors.registry import get

    return _checked_names(text, get)


def _checked_names(text: str, check) -> tuple[str, ...] | None:
    """The comma-separated names of `text`, each passed to `check` (which raises
    InvalidInput for a wrong one: an argparse error naming it); None when there are none."""
    names = tuple(v for v in text.split(",") if v)
    for name in names:
        try:
            check(name)
        except InvalidInput as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return names or None


def _dataset(workdir: Path, data: Path | None, size: int, seed: int) -> Path:
    """The dataset given, else PhotoDigits generated in the workdir."""
    if data is not None:
        log(f"dataset: {data}")
        return data
    data = workdir / "photodigits"
    log(f"generating PhotoDigits ({size} px) in {data}")
    generate_photodigits(data, size=size, seed=seed)
    return data


def _train_and_export(workdir: Path, data: Path, pipeline: Pipeline, size: int, seed: int,
                      device: str) -> None:
    """Train (or reuse) the pipeline's encoder and put it in the server's models dir."""
    run_dir = workdir / "runs" / demo_run_name(pipeline, size, seed, device)
    log(f"pipeline: {pipeline.describe()}")
    set_aside = set_aside_stale_run(run_dir, pipeline.algorithm, pipeline.hparams)
    if set_aside is not None:
        log(f"the cached run was trained with an earlier default ({set_aside[1]}); "
            f"moved to {set_aside[0]}, retraining")
    log(f"training the encoder in {run_dir} (on {device})")
    run_dir = train_encoder(data, run_dir, algorithm=pipeline.algorithm,
                            epochs=pipeline.epochs, seed=seed, image_size=size,
                            task=pipeline.task, augment=pipeline.augment,
                            aux=pipeline.aux, hparams=pipeline.hparams, device=device)
    shutil.rmtree(workdir / "models", ignore_errors=True)
    export_encoder(run_dir, workdir / "models" / "encoder.onnx")
    log(f"encoder: {workdir / 'models' / 'encoder.onnx'}")


def _serve_and_score(workdir: Path, data: Path, pipeline: Pipeline, seed: int,
                     clock: _StageClock) -> _Scored:
    """Start `envad serve`, store every image, fit and score each pass, replay the
    arrival orders, stop the server (also on failure)."""
    t0 = time.monotonic()
    store = workdir / "data"
    server = LocalServer(store, workdir / "models", log_path=workdir / "server.log")
    log("starting envad serve")
    server.start()
    try:
        log(f"server ready on {server.address} (log: {workdir / 'server.log'})")
        clock.lap("serve", t0)
        with EnvadClient(server.address, timeout=120) as client:
            with clock.stage("backfill"):
                source = open_source(data)
                # every image is stored, the unseen cameras' too: a camera's score
                # statistics come from its stored images (the README's archive path)
                summary = run_backfill(
                    client, source, workdir / "checkpoints" / "stored.jsonl",
                    BackfillOptions(splits=("train", "val", "test"), batch_size=64,
                                    concurrency=2))
                log(summary.format())
            passes, same_as = _passes(pipeline)
            scored, bundles = {}, {}
            for name, space, adaptation, detectors, file_name in passes:
                if same_as[name] == name:
                    bundles[name], scored[name] = _fit_and_score(
                        client, source, workdir, clock, name, seed,
                        FitSettings(detectors=tuple(detectors), seed=seed, space=space,
                                    score_adaptation=adaptation), file_name)
            with clock.stage("arrival orders"):
                orders = replay_orders(store / "bundles", bundles["pipeline"],
                                       client.export(RowFilter(splits=("test",))),
                                       scored["pipeline"].truth_by_id(), seed)
    finally:
        server.stop()
        log("server stopped")
    return _Scored(scored, same_as, orders)


def _passes(pipeline: Pipeline) -> tuple[list[tuple], dict[str, str]]:
    """The scoring passes (name, space, adaptation, detectors, scores file): the pipeline
    as served; then every registered detector with the space step, and the paper's eight
    without it (the paper's setting; NORM reads the raw embedding in every space). With,
    per pass, the first pass that fits the same space and detectors (whose scores it
    reuses)."""
    # the server's detector registry: loads the server, which a client module's import
    # must not
    from envad.server.detectors.registry import PAPER_DETECTORS
    from envad.server.detectors.registry import names as detector_names

    adapt = pipeline.score_adaptation
    passes = [("pipeline", pipeline.space, adapt, pipeline.detectors, "scores.jsonl"),
              ("all, space", pipeline.space, adapt, tuple(detector_names()),
               "scores-all.jsonl"),
              ("all, raw", "raw", "none", PAPER_DETECTORS, "scores-raw.jsonl")]
    first_of: dict[tuple, str] = {}
    same_as = {name: first_of.setdefault((space, adaptation, tuple(detectors)), name)
               for name, space, adaptation, detectors, _ in passes}
    return passes, same_as


def _fit_and_score(client: EnvadClient, source, workdir: Path, clock: _StageClock,
                   name: str, seed: int, settings: FitSettings, file_name: str
                   ) -> tuple[str, ScoredSet]:
    """Fit a bundle on the training cameras, score the unseen cameras with it (their
    stored embeddings): (its bundle id, the scores)."""
    with clock.stage(f"fit ({name})"):
        fit = client.fit(RowFilter(splits=("train",)), settings)
        log(f"fitted {len(fit.stats)} detectors on {fit.n_samples} embeddings "
            f"({fit.n_features} features), space {fit.space}, scores adapted "
            f"{fit.score_adaptation}, bundle {fit.bundle_id}")
    with clock.stage(f"score ({name})"):
        out = workdir / file_name
        result = run_backfill(
            client, source, workdir / "checkpoints" / f"test-{file_name}",
            BackfillOptions(splits=("test",), scores=True, store=False, batch_size=64,
                            concurrency=1, reuse_stored=True),
            scores_out=out)
        log(f"scored {result.ok} images of the unseen cameras -> {out}")
    return fit.bundle_id, load_scores(out)


def _report(data: Path, pipeline: Pipeline, seed: int, size: int, outcome: _Scored,
            tables: dict, plot, clock: _StageClock) -> dict:
    """report.json's record of the run."""
    rows, main_set = tables["pipeline"], outcome.scored["pipeline"]

    def aucs(table) -> dict:
        return {"roc_auc": {r.detector: round(r.pooled, 4) for r in table},
                "roc_auc_mean_per_camera": {r.detector: round(r.per_camera_mean, 4)
                                            for r in table}}
    return {
        "data": str(data), "pipeline": pipeline.to_json(), "seed": seed, "size": size,
        "algorithm": pipeline.algorithm, "epochs": pipeline.epochs,
        "n_test_images": int(len(main_set.truth)), "n_anomalies": int(main_set.truth.sum()),
        **aucs(rows),
        "all_detectors": {key: aucs(tables[name])
                          for key, name in (("space", "all, space"), ("raw", "all, raw"))},
        "arrival_orders": {r.order: {"roc_auc": round(r.pooled, 4),
                                     "roc_auc_mean_per_camera": round(r.per_camera_mean, 4)}
                           for r in outcome.orders},
        "plot": str(plot), "timings_s": clock.timings, "wall_time_s": round(clock.wall(), 1),
    }


def _print_summary(workdir: Path, data: Path, pipeline: Pipeline, outcome: _Scored,
                   tables: dict, plot, wall: float) -> None:
    print()
    print(describe_measurement(dataset_facts(data)))
    print()
    print(f"The pipeline as served ({pipeline.describe()}), the unseen cameras scored as "
          "an archive (every image stored, then scored):")
    print(format_table(tables["pipeline"]))
    print()
    print("The same bundle, each unseen camera's images arriving as a stream (each scored "
          "with the images stored before it), the ensemble:")
    print(format_orders(outcome.orders))
    print()
    print("Every detector, with the pipeline's space step and score adaptation and without "
          "them:")
    print(format_comparison(tables["all, space"], tables["all, raw"],
                            f"{pipeline.space}, {pipeline.score_adaptation}"))
    print()
    print(f"ROC plot:  {plot}")
    print(f"report:    {workdir / 'report.json'}")
    print(f"wall time: {wall:.0f}s ({wall / 60:.1f} min)")


def demo_run_name(pipeline: Pipeline, size: int, seed: int, device: str) -> str:
    """The training run's directory name: the pipeline's, with the device appended when
    it is not the CPU (a run's settings include its device, so runs trained on the CPU
    and on a GPU are two runs, and each machine finds its own)."""
    name = pipeline.run_name(size, seed)
    return name if device == "cpu" else f"{name}-{device.replace(':', '')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m envad.client.demo",
        description="The envad demo (`make demo`): dataset -> train -> export -> serve -> "
                    "backfill -> fit -> score unseen cameras -> ROC-AUC per detector, with "
                    "the pipeline's space step and without it.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("var/demo"),
                        help="where data, model, server store and report go")
    parser.add_argument("--data", type=Path, default=None,
                        help="folder-format dataset (default: generate PhotoDigits)")
    parser.add_argument("--pipeline", default="default",
                        help="default, paper, or a selection.json from `envad select`")
    parser.add_argument("--size", type=int, default=32, help="image side in px")
    parser.add_argument("--epochs", type=int, default=None,
                        help="training epochs (default: the pipeline's)")
    parser.add_argument("--algorithm", default=None,
                        help="pretraining algorithm (default: the pipeline's)")
    parser.add_argument("--seed", type=int, default=0, help="data and training seed")
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    parser.add_argument("--fresh", action="store_true",
                        help="delete the workdir first (otherwise a finished training run "
                             "with the same settings is reused)")
    parser.add_argument("--select", action="store_true",
                        help="choose the pipeline first with `envad select` on the "
                             "dataset's training cameras (test cameras never read), then "
                             "train and serve what it chose: for your own cameras, whose "
                             "content the shipped defaults were not chosen on "
                             "(docs/evaluation.md)")
    parser.add_argument("--select-candidates", type=int, default=SelectBudget.candidates,
                        help="with --select: the first N built-in candidates are compared "
                             "(the budget: N x folds trainings)")
    parser.add_argument("--select-folds", type=int, default=SelectBudget.folds,
                        help="with --select: leave-one-camera-out folds (at least 2)")
    parser.add_argument("--select-spaces", type=_space_list, default=None,
                        help="with --select: the space steps compared, comma-separated "
                             "(default: every one of `envad select`'s; fewer take less "
                             "time: the scoring of each fold grows with them)")
    parser.add_argument("--select-detectors", type=_detector_list, default=None,
                        help="with --select: the detectors fitted and chosen among, "
                             "comma-separated (default: every registered one; fewer take "
                             "less time)")
    args = parser.parse_args(argv)
    if args.data is not None and not (args.data / "metadata.csv").is_file():
        parser.error(f"--data {args.data}: no metadata.csv there (docs/training.md, "
                     "folder format)")
    if args.select and (args.pipeline != "default" or args.algorithm):
        parser.error("--select chooses the pipeline: leave out --pipeline and --algorithm")
    if args.select and (args.select_candidates < 1 or args.select_folds < 2):
        parser.error("--select needs --select-candidates >= 1 and --select-folds >= 2")
    select = (SelectBudget(args.select_candidates, args.select_folds, args.select_spaces,
                           args.select_detectors) if args.select else None)
    run_demo(args.workdir, data=args.data, pipeline=resolve_pipeline(args.pipeline),
             epochs=args.epochs, algorithm=args.algorithm, seed=args.seed, size=args.size,
             fresh=args.fresh, device=args.device, select=select)
    return 0


if __name__ == "__main__":
    sys.exit(main())
