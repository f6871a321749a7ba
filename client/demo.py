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
from dataclasses import replace
from pathlib import Path
from typing import Any

from envad.devices import DEVICE_HELP, resolve_device
from envad.pipeline import DEFAULT_PIPELINE, Pipeline, resolve_pipeline


def log(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def run_demo(workdir: Path, *, data: Path | None = None, pipeline: Pipeline = DEFAULT_PIPELINE,
             epochs: int | None = None, algorithm: str | None = None, seed: int = 0,
             size: int = 32, fresh: bool = False, device: str = "auto") -> dict:
    """Run every stage in `workdir`; returns the report (also written to report.json).

    `data`: a folder-format dataset (train/val splits of the training cameras, test split
    of unseen cameras); None generates PhotoDigits (deterministic) in the workdir.
    `epochs` and `algorithm` override the pipeline's. The training run lives in
    `workdir/runs/TRAINING-sSEED` (`-cuda` added when it trains on a GPU): a finished run
    with the same settings is reused, an interrupted one resumed; `fresh` deletes the
    whole workdir first. `device`: where the encoder trains (`auto`: the GPU when torch
    sees one).
    """
    from envad.client.backfill import run_backfill
    from envad.client.backfill_plan import BackfillOptions
    from envad.client.demo_orders import format_orders, replay_orders
    from envad.client.demo_report import (
        auc_table,
        dataset_facts,
        describe_measurement,
        format_comparison,
        format_table,
        load_scores,
        plot_roc,
    )
    from envad.client.library import EnvadClient
    from envad.client.results import RowFilter
    from envad.client.server_process import LocalServer
    from envad.client.sources import open_source
    from envad.client.training_bridge import (
        export_encoder,
        set_aside_stale_run,
        train_encoder,
    )
    from envad.server.detectors.registry import PAPER_DETECTORS
    from envad.server.detectors.registry import names as detector_names

    overrides: dict[str, Any] = {k: v for k, v in (("epochs", epochs), ("algorithm", algorithm))
                                 if v}
    pipeline = replace(pipeline, **overrides)
    started = time.monotonic()
    timings: dict[str, float] = {}
    if fresh:
        shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    models, store = workdir / "models", workdir / "data"
    encoder = models / "encoder.onnx"
    # a fresh store, checkpoints and outputs on every run (results must not mix runs)
    for stale in (store, workdir / "checkpoints"):
        shutil.rmtree(stale, ignore_errors=True)
    for name in ("scores.jsonl", "scores-raw.jsonl", "roc.png", "report.json", "server.log"):
        (workdir / name).unlink(missing_ok=True)

    def stage(name: str, t0: float) -> None:
        timings[name] = round(time.monotonic() - t0, 1)
        log(f"{name}: {timings[name]:.1f}s")

    t0 = time.monotonic()
    if data is None:
        from envad.training.photodigits import generate

        data = workdir / "photodigits"
        log(f"generating PhotoDigits ({size} px) in {data}")
        generate(data, size=size, seed=seed, progress=False)
    else:
        log(f"dataset: {data}")
    stage("data", t0)

    t0 = time.monotonic()
    device = resolve_device(device)
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
    shutil.rmtree(models, ignore_errors=True)
    export_encoder(run_dir, encoder)
    log(f"encoder: {encoder}")
    stage("train+export", t0)

    t0 = time.monotonic()
    server = LocalServer(store, models, log_path=workdir / "server.log")
    log("starting envad serve")
    server.start()
    try:
        log(f"server ready on {server.address} (log: {workdir / 'server.log'})")
        stage("serve", t0)
        with EnvadClient(server.address, timeout=120) as client:
            t0 = time.monotonic()
            source = open_source(data)
            # every image is stored, the unseen cameras' too: a camera's score
            # statistics come from its stored images (the README's archive path)
            summary = run_backfill(
                client, source, workdir / "checkpoints" / "stored.jsonl",
                BackfillOptions(splits=("train", "val", "test"), batch_size=64,
                                concurrency=2))
            log(summary.format())
            stage("backfill", t0)

            scored = {}
            bundles: dict[str, str] = {}
            # the pipeline as served; then every registered detector with the space step,
            # and the paper's eight without it (the paper's setting; NORM reads the raw
            # embedding in every space). A pass that would fit the same space and
            # detectors as an earlier one reuses that one's scores.
            adapt = pipeline.score_adaptation
            passes = [("pipeline", pipeline.space, adapt, pipeline.detectors, "scores.jsonl"),
                      ("all, space", pipeline.space, adapt, tuple(detector_names()),
                       "scores-all.jsonl"),
                      ("all, raw", "raw", "none", PAPER_DETECTORS, "scores-raw.jsonl")]
            same_as: dict[str, str] = {}
            first_of: dict[tuple, str] = {}
            for name, space, adaptation, detectors, _ in passes:
                key = (space, adaptation, tuple(detectors))
                same_as[name] = first_of.setdefault(key, name)
            for name, space, adaptation, detectors, file_name in passes:
                if same_as[name] != name:
                    continue
                t0 = time.monotonic()
                fit = client.fit(RowFilter(splits=("train",)), seed=seed, space=space,
                                 detectors=detectors, score_adaptation=adaptation)
                log(f"fitted {len(fit.stats)} detectors on {fit.n_samples} embeddings "
                    f"({fit.n_features} features), space {fit.space}, scores adapted "
                    f"{fit.score_adaptation}, bundle {fit.bundle_id}")
                stage(f"fit ({name})", t0)
                bundles[name] = fit.bundle_id
                t0 = time.monotonic()
                out = workdir / file_name
                result = run_backfill(
                    client, source, workdir / "checkpoints" / f"test-{file_name}",
                    BackfillOptions(splits=("test",), scores=True, store=False, batch_size=64,
                                    concurrency=1, reuse_stored=True),
                    scores_out=out)
                log(f"scored {result.ok} images of the unseen cameras -> {out}")
                stage(f"score ({name})", t0)
                scored[name] = load_scores(out)
            t0 = time.monotonic()
            orders = replay_orders(store / "bundles", bundles["pipeline"],
                                   client.export(RowFilter(splits=("test",))),
                                   scored["pipeline"].truth_by_id(), seed)
            stage("arrival orders", t0)
    finally:
        server.stop()
        log("server stopped")

    tables = {name: auc_table(scored[same_as[name]]) for name in same_as}
    rows = tables["pipeline"]
    plot = plot_roc(scored["pipeline"], rows, workdir / "roc.png",
                    f"unseen cameras ({pipeline.training_name}, space {pipeline.space})")
    wall = time.monotonic() - started
    main_set = scored["pipeline"]
    report = {
        "data": str(data), "pipeline": pipeline.to_json(), "seed": seed, "size": size,
        "algorithm": pipeline.algorithm, "epochs": pipeline.epochs,
        "n_test_images": int(len(main_set.truth)), "n_anomalies": int(main_set.truth.sum()),
        "roc_auc": {r.detector: round(r.pooled, 4) for r in rows},
        "roc_auc_mean_per_camera": {r.detector: round(r.per_camera_mean, 4) for r in rows},
        "all_detectors": {
            key: {"roc_auc": {r.detector: round(r.pooled, 4) for r in tables[name]},
                  "roc_auc_mean_per_camera": {r.detector: round(r.per_camera_mean, 4)
                                              for r in tables[name]}}
            for key, name in (("space", "all, space"), ("raw", "all, raw"))},
        "arrival_orders": {r.order: {"roc_auc": round(r.pooled, 4),
                                     "roc_auc_mean_per_camera": round(r.per_camera_mean, 4)}
                           for r in orders},
        "plot": str(plot), "timings_s": timings, "wall_time_s": round(wall, 1),
    }
    (workdir / "report.json").write_text(json.dumps(report, indent=2))
    print()
    print(describe_measurement(dataset_facts(data)))
    print()
    print(f"The pipeline as served ({pipeline.describe()}), the unseen cameras scored as "
          "an archive (every image stored, then scored):")
    print(format_table(rows))
    print()
    print("The same bundle, each unseen camera's images arriving as a stream (each scored "
          "with the images stored before it), the ensemble:")
    print(format_orders(orders))
    print()
    print("Every detector, with the pipeline's space step and score adaptation and without "
          "them:")
    print(format_comparison(tables["all, space"], tables["all, raw"],
                            f"{pipeline.space}, {pipeline.score_adaptation}"))
    print()
    print(f"ROC plot:  {plot}")
    print(f"report:    {workdir / 'report.json'}")
    print(f"wall time: {wall:.0f}s ({wall / 60:.1f} min)")
    return report


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
    args = parser.parse_args(argv)
    if args.data is not None and not (args.data / "metadata.csv").is_file():
        parser.error(f"--data {args.data}: no metadata.csv there (docs/training.md, "
                     "folder format)")
    run_demo(args.workdir, data=args.data, pipeline=resolve_pipeline(args.pipeline),
             epochs=args.epochs, algorithm=args.algorithm, seed=args.seed, size=args.size,
             fresh=args.fresh, device=args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
