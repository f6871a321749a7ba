"""`envad backfill SOURCE`: ingest an archive through the service or, with --engine ray,
embed it on a Ray cluster and write the store's Lance table directly."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from pathlib import Path

from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions, check_some_wanted, job_header
from envad.client.backfill_report import BackfillInterrupted
from envad.client.cli_help import EnvadHelpFormatter
from envad.client.command_line import open_client
from envad.client.ray_backfill import RayOptions, resolve_target, run_ray_backfill
from envad.client.source_options import add_source_arguments, source_options
from envad.client.sources import open_source
from envad.client.work_dirs import checkpoint_dir


def register(subparsers, connection_parser) -> None:
    p = subparsers.add_parser(
        "backfill", parents=[connection_parser()],
        formatter_class=EnvadHelpFormatter,
        help="ingest (and optionally score) a whole archive, resumably",
        description="Stream an archive into the store: a folder-format dataset, a plain "
                    "image tree (environment = first folder), a Camtrap DP package "
                    "(environment = location or deployment, id = deploymentID/mediaID), a "
                    "MegaDetector results JSON, or a Parquet manifest (id, uri, ...). "
                    "Progress is journaled in a checkpoint; after a crash or Ctrl-C, run the "
                    "same command with --resume. Exit code 1 when some items failed.")
    p.add_argument("source", type=Path, metavar="SOURCE", help="archive folder or file")
    add_source_arguments(p)
    _add_run_arguments(p.add_argument_group("run"))
    _add_score_arguments(p.add_argument_group("scores"))
    _add_ray_arguments(p.add_argument_group("ray engine"))
    p.set_defaults(func=cmd_backfill)


def _add_run_arguments(g) -> None:
    g.add_argument("--engine", choices=["service", "ray"], default="service",
                   help="send through the server's Ingest, or embed on Ray and write Lance")
    g.add_argument("--batch-size", type=int, default=64, help="images per request")
    g.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    g.add_argument("--rate-limit", type=float, default=0.0,
                   help="at most this many images per second (0: unlimited)")
    g.add_argument("--limit", type=int, default=0, help="stop after N new items (0: all)")
    g.add_argument("--keep-duplicates", action="store_true",
                   help="store an image even when the same content is stored already under "
                        "another id (another source, path or camera)")
    g.add_argument("--checkpoint", type=Path,
                   help="checkpoint journal (default: DATA_DIR/checkpoints/backfill-"
                        "<source>-<hash of the job>.jsonl, DATA_DIR being the server's data "
                        "dir when it is on this machine, else ~/.local/share/envad)")
    g.add_argument("--resume", action="store_true",
                   help="continue the interrupted job recorded in the checkpoint, skipping "
                        "finished items (a scoring job: only a run of the same detector "
                        "bundle; the same command without --resume scores again after a "
                        "refit, and scores only new images otherwise)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")


def _add_score_arguments(g) -> None:
    g.add_argument("--scores-out", type=Path, metavar="FILE",
                   help="also score every image and write the scores: .jsonl, .csv, "
                        ".json (MegaDetector format 1.4, the score as the classification "
                        "'envad anomaly'), or with --scores-format camtrap-dp a Camtrap DP "
                        "observations.csv")
    g.add_argument("--scores-format", default="auto",
                   choices=["auto", "jsonl", "csv", "megadetector", "camtrap-dp"],
                   help="format of --scores-out (auto: from the file name)")
    g.add_argument("--group-events", type=float, default=0.0, metavar="SECONDS",
                   help="with --scores-out: group images into events (bursts), one "
                        "decision each: the Camtrap DP eventID, else images of a camera "
                        "at most SECONDS apart; adds event, event_size, event_ensemble, "
                        "event_is_anomaly (default 0: off)")
    g.add_argument("--no-store", action="store_true",
                   help="with --scores-out: score only, store nothing")


def _add_ray_arguments(g) -> None:
    g.add_argument("--ray-address", default=None,
                   help="Ray cluster address (default: start a local Ray)")
    g.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray")
    g.add_argument("--workers", type=int, default=2, help="embedding actors")
    g.add_argument("--data-dir",
                   help="the server's data dir: a local path or a URI on object storage "
                        "such as s3://bucket/prefix (default: from the server's GetInfo)")
    g.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   help="object-storage option of a URI data dir, as `envad serve` takes "
                        "it (aws_endpoint, aws_region, allow_http, aws_access_key_id, "
                        "...); repeatable (default: ENVAD_STORAGE_OPTIONS). The AWS_* "
                        "variables are honoured too. Values of secret keys are never shown")
    g.add_argument("--model-file", type=Path,
                   help="ONNX encoder to embed with (default: the server's active model)")
    g.add_argument("--chunk-size", type=int, default=4096,
                   help="images per Lance commit (one commit per chunk of fragments)")


def default_checkpoint(source, job: dict) -> Path:
    """The job's checkpoint under the work dir (envad.client.work_dirs), named after the
    source and a hash of the job header."""
    digest = hashlib.sha256(json.dumps(job, sort_keys=True, default=str).encode()).hexdigest()
    name = Path(source.describe()["path"]).name or "source"
    return checkpoint_dir(job.get("data_dir")) / f"backfill-{name}-{digest[:12]}.jsonl"


def cmd_backfill(args) -> int:
    source = open_source(args.source, args.source_format, **source_options(args))
    if args.no_store and not args.scores_out:
        raise SystemExit("envad backfill: --no-store needs --scores-out")
    options = BackfillOptions(
        batch_size=args.batch_size, concurrency=args.concurrency,
        envs=tuple(args.only_env), splits=tuple(args.only_split),
        scores=args.scores_out is not None, store=not args.no_store,
        rate_limit=args.rate_limit, limit=args.limit,
        skip_duplicates=not args.keep_duplicates,
    )
    check_some_wanted(source, options)      # before any work: say why a run would do nothing
    if args.engine == "ray":
        return _run_ray(args, source, options)


    with open_client(args) as client, _summary_on_interrupt(args.json):
        if options.store:       # before the checkpoint: a run that cannot write starts none
            client.check_writer("envad backfill")
        info = client.info()
        model_id = info.active_model.model_id if info.active_model else ""
        bundle_id = info.bundle.bundle_id if options.scores and info.bundle else ""
        checkpoint = args.checkpoint or default_checkpoint(
            source, job_header(source, options, model_id, info.data_dir, bundle_id=bundle_id))
        print(f"checkpoint: {checkpoint}", file=sys.stderr)
        summary = run_backfill(client, source, checkpoint, options, resume=args.resume,
                               scores_out=args.scores_out, scores_format=args.scores_format,
                               progress=not args.no_progress, event_gap_s=args.group_events)
    _print_summary(summary, args.json)
    return 1 if summary.failed else 0


def _run_ray(args, source, options) -> int:
    args.command_extra = "ray"  # what `envad` names when a package of this engine is missing

    if getattr(source, "crops", False):
        raise SystemExit("envad backfill: --crops runs on --engine service only")
    if options.scores:
        raise SystemExit("envad backfill: --engine ray stores embeddings only; score "
                         "afterwards with --engine service --no-store --scores-out")
    target = resolve_target(args)
    checkpoint = args.checkpoint or default_checkpoint(
        source, job_header(source, options, target.model_id, target.data_dir, engine="ray"))
    print(f"checkpoint: {checkpoint}", file=sys.stderr)
    ray_options = RayOptions(address=args.ray_address, num_cpus=args.num_cpus,
                             workers=args.workers, batch_size=args.batch_size,
                             chunk_size=args.chunk_size)
    with _summary_on_interrupt(args.json), stdout_for_json_only(args.json):
        summary = run_ray_backfill(source, target, checkpoint, options, ray_options,
                                   resume=args.resume, progress=not args.no_progress)
    _print_summary(summary, args.json)
    return 1 if summary.failed else 0


@contextlib.contextmanager
def stdout_for_json_only(as_json: bool):
    """With --json, whatever a library prints to stdout while the job runs goes to stderr
    (Ray prints its workers' and raylet's messages, such as "A worker died", to the
    driver's stdout), so that stdout carries the JSON summary alone."""
    if not as_json:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


@contextlib.contextmanager
def _summary_on_interrupt(as_json: bool):
    """On Ctrl-C print what was done, then let `envad` exit with code 130."""
    try:
        yield
    except BackfillInterrupted as exc:
        _print_summary(exc.summary, as_json)
        raise


def _print_summary(summary, as_json: bool) -> None:
    if as_json:
        json.dump(summary.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(summary.format())
