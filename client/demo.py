"""`make demo`: the whole product on the built-in PhotoDigits benchmark, end to end.

PhotoDigits (32 px) -> train a small encoder -> export ONNX -> start `envad serve` ->
backfill the training cameras -> fit the detectors -> score the unseen cameras ->
ROC-AUC per detector + ROC plot -> stop the server (also on failure).

What it measures: how well detectors fit on embeddings of *normal* images (digits 0-5)
from 6 training cameras flag *new content* (digits 6-9) in images from 3 cameras never
seen in training, whose style (background, lighting, noise) is new too. ROC-AUC 0.5 is
chance; BENCHMARK.md gives the floor (raw pixels, ~0.53) and ceiling (content oracle,
~0.98) of this task.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

# GroupDRO, 5 epochs: the best pretraining at 32 px in docs/RESULTS.md, and about three
# minutes of training on 2 CPU cores.
DEFAULT_EPOCHS = 5
DEFAULT_ALGORITHM = "groupdro"
DESCRIPTION = (
    "What this measures: detectors are fit on embeddings of normal images (digits 0-5) "
    "from 6 training cameras, then score 900 images from 3 unseen cameras, 40% of which "
    "show unseen content (digits 6-9). ROC-AUC: 0.5 = chance, 1.0 = perfect; anomalies "
    "are the positive class. 'mean per camera' averages the ROC-AUC of each unseen camera."
)


def log(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def run_demo(workdir: Path, *, epochs: int = DEFAULT_EPOCHS,
             algorithm: str = DEFAULT_ALGORITHM, seed: int = 0, fresh: bool = False) -> dict:
    """Run every stage in `workdir`; returns the report (also written to report.json).

    PhotoDigits is regenerated every time (deterministic). The training run lives in
    `workdir/runs/ALGORITHM-eEPOCHS-sSEED`: training reuses a finished run with the same
    settings and resumes an interrupted one; `fresh` deletes the whole workdir first.
    """
    from envad.client.backfill import BackfillOptions, run_backfill
    from envad.client.demo_report import auc_table, format_table, load_scores, plot_roc
    from envad.client.library import EnvadClient
    from envad.client.results import RowFilter
    from envad.client.server_process import LocalServer
    from envad.client.sources import open_source
    from envad.client.training_bridge import export_encoder, train_encoder

    started = time.monotonic()
    timings: dict[str, float] = {}
    if fresh:
        shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    dataset, models, data = workdir / "photodigits", workdir / "models", workdir / "data"
    encoder = models / "encoder.onnx"
    # a fresh store, checkpoints and outputs on every run (results must not mix runs)
    for stale in (data, workdir / "checkpoints"):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in (workdir / "scores.jsonl", workdir / "roc.png", workdir / "report.json",
                  workdir / "server.log"):
        stale.unlink(missing_ok=True)

    def stage(name: str, t0: float) -> None:
        timings[name] = round(time.monotonic() - t0, 1)
        log(f"{name}: {timings[name]:.1f}s")

    t0 = time.monotonic()
    from envad.training.photodigits import generate

    log(f"generating PhotoDigits (32 px) in {dataset}")
    generate(dataset, size=32, seed=seed, progress=False)
    stage("generate", t0)

    t0 = time.monotonic()
    run_dir = workdir / "runs" / f"{algorithm}-e{epochs}-s{seed}"
    log(f"training a {algorithm} encoder for {epochs} epoch(s) in {run_dir}")
    run_dir = train_encoder(dataset, run_dir, algorithm=algorithm, epochs=epochs, seed=seed,
                            image_size=32)
    shutil.rmtree(models, ignore_errors=True)
    export_encoder(run_dir, encoder)
    log(f"encoder: {encoder}")
    stage("train+export", t0)

    t0 = time.monotonic()
    server = LocalServer(data, models, log_path=workdir / "server.log")
    log("starting envad serve")
    server.start()
    try:
        log(f"server ready on {server.address} (log: {workdir / 'server.log'})")
        stage("serve", t0)
        with EnvadClient(server.address, timeout=120) as client:
            t0 = time.monotonic()
            source = open_source(dataset)
            summary = run_backfill(
                client, source, workdir / "checkpoints" / "train.jsonl",
                BackfillOptions(splits=("train", "val"), batch_size=64, concurrency=2))
            log(summary.format())
            stage("backfill", t0)

            t0 = time.monotonic()
            fit = client.fit(RowFilter(splits=("train",)), seed=seed)
            log(f"fitted {len(fit.stats)} detectors on {fit.n_samples} embeddings "
                f"({fit.n_features} features), bundle {fit.bundle_id}")
            stage("fit", t0)

            t0 = time.monotonic()
            scores = workdir / "scores.jsonl"
            scored = run_backfill(
                client, source, workdir / "checkpoints" / "test.jsonl",
                BackfillOptions(splits=("test",), scores=True, store=False, batch_size=64,
                                concurrency=2),
                scores_out=scores)
            log(f"scored {scored.ok} images of the unseen cameras -> {scores}")
            stage("score", t0)
    finally:
        server.stop()
        log("server stopped")

    scored_set = load_scores(scores)
    rows = auc_table(scored_set)
    plot = plot_roc(scored_set, rows, workdir / "roc.png",
                    f"PhotoDigits, unseen cameras ({algorithm}, {epochs} epochs)")
    wall = time.monotonic() - started
    report = {
        "algorithm": algorithm, "epochs": epochs, "seed": seed,
        "n_test_images": int(len(scored_set.truth)),
        "n_anomalies": int(scored_set.truth.sum()),
        "roc_auc": {r.detector: round(r.pooled, 4) for r in rows},
        "roc_auc_mean_per_camera": {r.detector: round(r.per_camera_mean, 4) for r in rows},
        "plot": str(plot), "timings_s": timings, "wall_time_s": round(wall, 1),
    }
    (workdir / "report.json").write_text(json.dumps(report, indent=2))
    print()
    print(DESCRIPTION)
    print()
    print(format_table(rows))
    print()
    print(f"ROC plot:  {plot}")
    print(f"report:    {workdir / 'report.json'}")
    print(f"wall time: {wall:.0f}s ({wall / 60:.1f} min)")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m envad.client.demo",
        description="The envad demo (`make demo`): PhotoDigits -> train -> export -> serve "
                    "-> backfill -> fit -> score unseen cameras -> ROC-AUC per detector.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("var/demo"),
                        help="where data, model, server store and report go")
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS, help="training epochs")
    parser.add_argument("--algorithm", default=DEFAULT_ALGORITHM, help="pretraining algorithm")
    parser.add_argument("--seed", type=int, default=0, help="data and training seed")
    parser.add_argument("--fresh", action="store_true",
                        help="delete the workdir first (otherwise a finished training run "
                             "with the same settings is reused)")
    args = parser.parse_args(argv)
    run_demo(args.workdir, epochs=args.epochs, algorithm=args.algorithm, seed=args.seed,
             fresh=args.fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
