"""`envad` client subcommands: score, fit, info, models, export-embeddings, health
(and, from their own modules, backfill and retrain).

Every command talks to a running server through EnvadClient; connection flags are
shared (--server, --token, --tls, ...). Output is a table for people or --json for
scripts.
"""

from __future__ import annotations

import dataclasses
import errno
import sys
from pathlib import Path

from tqdm import tqdm

from envad.client import backfill_command, label_command, report_command, retrain
from envad.client.cli_help import EnvadHelpFormatter
from envad.client.command_line import (
    add_filter_flags,
    add_json_flag,
    connection_parser,
    open_client,
    print_json,
    print_table,
    row_filter,
)
from envad.client.fit_choice import choose_fit_rows, few_rows_warning
from envad.client.fit_options import add_fit_options, fit_settings
from envad.client.next_step import next_step
from envad.client.progress import wait_with_progress
from envad.client.results import ImageInput
from envad.client.sources.exif import exif_timestamp
from envad.defaults import DEFAULT_TOP_K, SERVICE_NAME
from envad.errors import EnvadError
from envad.records import FIT_SPLIT, MIN_FIT_ROWS

# ------------------------------------------------------------------ registration


def register(subparsers) -> None:
    """This module's commands, then those of the parts with modules of their own."""
    for register_command in (register_score, register_fit, register_reset_camera_stats,
                             register_info, register_models, register_export,
                             register_health):
        register_command(subparsers)
    backfill_command.register(subparsers, connection_parser)
    retrain.register(subparsers, connection_parser)
    label_command.register(subparsers, connection_parser)
    report_command.register(subparsers, connection_parser)


def register_score(subparsers) -> None:
    p = subparsers.add_parser(
        "score", parents=[connection_parser()], formatter_class=EnvadHelpFormatter,
        help="score images against the server's detectors",
        description="Score image files: per image the ensemble score (mean calibrated "
                    "detector score, 0..1, higher = more anomalous), the anomaly flag at the "
                    "bundle's threshold, and each detector's calibrated score.")
    p.add_argument("images", nargs="+", type=Path, metavar="IMAGE", help="image files")
    p.add_argument("--env", default="", help="environment (camera) of the images")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--top-k", type=int, default=0,
                   help="nearest stored neighbours to return (default: the server's, "
                        f"{DEFAULT_TOP_K})")
    p.add_argument("--threshold", type=float, help="override the bundle's threshold (0..1]")
    p.add_argument("--store", action="store_true", help="also store the images")
    p.add_argument("--split-name", default="", help="split for stored images")
    p.add_argument("--label-name", default="", help="label for stored images")
    p.add_argument("--batch-size", type=int, default=32, help="images per Score call")
    p.add_argument("--include-self", action="store_true",
                   help="let an image's own stored row (same id or content) be a neighbour")
    p.add_argument("--include-known-anomalies", action="store_true",
                   help="let stored rows labelled as known anomalies be neighbours")
    p.set_defaults(func=cmd_score)


def register_fit(subparsers) -> None:
    p = subparsers.add_parser(
        "fit", parents=[connection_parser(3600.0)], formatter_class=EnvadHelpFormatter,
        help="fit the anomaly detectors on stored embeddings",
        description="Fit detectors on the stored rows matching the filter, persist the "
                    f"bundle and activate it. Without --split: split {FIT_SPLIT} when any "
                    "row has it, else every stored row (the choice is printed). Fewer "
                    f"than {MIN_FIT_ROWS} rows are refused unless --allow-few-rows.")
    add_filter_flags(p, split_help="only rows of this split (repeatable; default: "
                                   f"{FIT_SPLIT} when stored, else every stored row)")
    add_fit_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_fit)


def register_reset_camera_stats(subparsers) -> None:
    p = subparsers.add_parser(
        "reset-camera-stats", parents=[connection_parser()], formatter_class=EnvadHelpFormatter,
        help="forget running per-camera statistics (a camera was moved or re-aimed)",
        description="The camera-aware spaces (center_l2, center_white_l2) re-centre an "
                    "unseen camera on the running mean of the images it sent, and score "
                    "adaptation (camera) puts each camera's scores on the fit set's scale "
                    "with the running mean and spread of the scores it received. Forget "
                    "both for the named cameras (all cameras when none is named); they "
                    "start again from the fit rows' statistics.")
    p.add_argument("envs", nargs="*", metavar="ENV", help="cameras to forget (default: all)")
    add_json_flag(p)
    p.set_defaults(func=cmd_reset_camera_stats)


def register_info(subparsers) -> None:
    p = subparsers.add_parser(
        "info", parents=[connection_parser()], formatter_class=EnvadHelpFormatter,
        help="show the server's state",
        description="Server version, active encoder and detector bundle, rows per environment.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)



def register_models(subparsers) -> None:
    models = subparsers.add_parser(
        "models", help="list or activate encoders",
        description="Encoders (ONNX files) in the server's models directory.")
    models_sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    p = models_sub.add_parser("list", parents=[connection_parser()], help="list the encoders",
                              description="List the encoders the server found.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_models_list)
    p = models_sub.add_parser("activate", parents=[connection_parser()],
                              help="switch the active encoder",
                              description="Switch the active encoder; in-flight requests "
                                          "finish on the old one.")
    p.add_argument("model_id", help="model id (see `envad models list`)")
    add_json_flag(p)
    p.set_defaults(func=cmd_models_activate)


def register_export(subparsers) -> None:
    p = subparsers.add_parser(
        "export-embeddings", parents=[connection_parser(None)], formatter_class=EnvadHelpFormatter,
        help="export stored embeddings and metadata to Parquet",
        description="Stream the active encoder's stored rows (id, env, label, split, "
                    "timestamp, uri, sha256, model_id, ingested_at, event, vector) into a "
                    "Parquet file, for offline retraining jobs.")
    p.add_argument("--out", type=Path, required=True, metavar="FILE.parquet",
                   help="output Parquet file (written atomically)")
    add_filter_flags(p)
    p.add_argument("--without-vectors", action="store_true", help="metadata only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_flag(p)
    p.set_defaults(func=cmd_export)


def register_health(subparsers) -> None:
    p = subparsers.add_parser(
        "health", parents=[connection_parser(5.0)], formatter_class=EnvadHelpFormatter,
        help="check that a server is up (exit 0 when SERVING)",
        description="gRPC health check. By default checks readiness (the scoring service "
                    "has an encoder loaded); --live only checks that the process answers.")
    p.add_argument("--live", action="store_true", help="liveness only (service \"\")")
    p.add_argument("--wait", type=float, default=0.0,
                   help="keep trying for this many seconds before giving up")
    add_json_flag(p)
    p.set_defaults(func=cmd_health)



# ------------------------------------------------------------------ handlers


def cmd_score(args) -> int:
    if args.batch_size < 1:
        raise SystemExit("envad score: --batch-size must be >= 1")
    check_image_files(args.images)
    rows, records = [], []
    failed = 0
    with open_client(args) as client:
        for start in range(0, len(args.images), args.batch_size):
            paths = args.images[start:start + args.batch_size]
            images = [with_capture_time(ImageInput.from_path(p, env=args.env)) for p in paths]
            result = client.score(images, store=args.store, split=args.split_name,
                                  label=args.label_name, threshold=args.threshold,
                                  top_k=args.top_k, include_self=args.include_self,
                                  include_known_anomalies=args.include_known_anomalies)
            for path, res in zip(paths, result.results, strict=True):
                record = {"image": str(path), **dataclasses.asdict(res),
                          "provenance": dataclasses.asdict(result.provenance)}
                records.append(record)
                if res.error is not None:
                    failed += 1
                    rows.append([path, res.env, "-", "error", f"{res.error.code}: "
                                 f"{res.error.message}"])
                else:
                    detail = " ".join(f"{d.detector}={d.calibrated:.2f}" for d in res.detectors)
                    rows.append([path, res.env, f"{res.ensemble:.3f}",
                                 "ANOMALY" if res.is_anomaly else "normal", detail])
    if args.json:
        print_json(records)
    else:
        print_table(["IMAGE", "ENV", "ENSEMBLE", "VERDICT", "CALIBRATED DETECTOR SCORES"], rows)
    return 1 if failed else 0


def with_capture_time(image):
    """`image` with its EXIF capture time (stored with it under --store)."""

    return dataclasses.replace(image, timestamp=exif_timestamp(image.data))


def check_image_files(paths: list[Path]) -> None:
    """Raise the OSError `envad` reports for a path that is not a readable file, before
    anything is sent."""

    for path in paths:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))


def cmd_fit(args) -> int:
    with open_client(args) as client:
        choice = choose_fit_rows(client, tuple(args.env), tuple(args.split), tuple(args.label))
        print(f"fit: on {choice.description}", file=sys.stderr)
        result = wait_with_progress(
            lambda: client.fit(choice.row_filter, fit_settings(args), timeout=args.timeout),
            "fit", enabled=not args.no_progress)
    warning = few_rows_warning(result.n_samples)
    if warning:
        print(f"envad: {warning}", file=sys.stderr)
    if args.json:
        print_json(result)
        return 0
    print(f"bundle {result.bundle_id}: {result.n_samples} samples x {result.n_features} "
          f"features, space {result.space}, score adaptation {result.score_adaptation}, "
          f"threshold {result.threshold:.3f}, "
          f"{'activated' if result.activated else 'not activated'}")
    if result.fit_groups:
        print(result.fit_groups)
    print_table(["DETECTOR", "FIT SECONDS", "SAMPLES"],
                [[s.detector, f"{s.fit_seconds:.2f}", s.n_samples] for s in result.stats])
    return 0


def cmd_reset_camera_stats(args) -> int:
    with open_client(args) as client:
        reset = client.reset_camera_stats(args.envs, timeout=args.timeout)
    if args.json:
        print_json({"reset": list(reset)})
        return 0
    print(f"forgot the statistics of {len(reset)} camera(s): {', '.join(reset) or '-'}")
    return 0


def cmd_info(args) -> int:
    with open_client(args) as client:
        info = client.info()
    step = next_step(info)
    if args.json:
        print_json({**dataclasses.asdict(info), "next_step": step})
        return 0
    model = info.active_model
    print(f"server       {args.server} (envad {info.server_version})")
    print(f"data dir     {info.data_dir}")
    model_line = (f"{model.model_id} ({model.algorithm}, {model.embedding_dim}-d)"
                  if model else "-")
    print(f"model        {model_line}")
    bundle = info.bundle
    bundle_line = f"{bundle.bundle_id}: {', '.join(bundle.detectors)}" if bundle else "-"
    print(f"detectors    {bundle_line}")
    if bundle:
        print(f"space        {bundle.space}")
        print(f"adaptation   {bundle.score_adaptation}")
        print(f"calibration  {bundle.calibration}")
        print(f"fit rows     {bundle.fit_groups or 'scored like any image'}")
    print(f"rows         {info.total_rows} (index {info.index_rows}, "
          f"table version {info.table_version})")
    for env, n in sorted(info.env_counts.items()):
        print(f"  {env or '(none)':<20} {n}")
    print(f"next step    {step}")
    return 0


def cmd_models_list(args) -> int:
    with open_client(args) as client:
        listing = client.list_models()
    if args.json:
        print_json(listing)
        return 0
    print(f"models dir: {listing.models_dir}")
    print_table(["", "MODEL", "ALGORITHM", "SIZE", "DIM", "DATASET", "FILE"],
                [["*" if m.active else "", m.model_id, m.algorithm, m.input_size,
                  m.embedding_dim, m.dataset, m.file] for m in listing.models])
    return 0


def cmd_models_activate(args) -> int:
    with open_client(args) as client:
        model = client.activate_model(args.model_id)
    if args.json:
        print_json(model)
        return 0
    print(f"active model: {model.model_id} ({model.file})")
    return 0


def cmd_export(args) -> int:
    with open_client(args) as client, tqdm(unit="row", desc="export", file=sys.stderr,
                                           disable=args.no_progress) as bar:
        rows = client.export_parquet(args.out, row_filter(args),
                                     with_vectors=not args.without_vectors,
                                     timeout=args.timeout, progress=bar.update)
    if args.json:
        print_json({"rows": rows, "out": str(args.out)})
        return 0
    print(f"{rows} rows -> {args.out}")
    return 0


def cmd_health(args) -> int:
    service = "" if args.live else SERVICE_NAME
    with open_client(args) as client:
        try:
            if args.wait > 0:
                client.wait_until_serving(args.wait, service=service)
                status = "SERVING"
            else:
                status = client.health(service, timeout=args.timeout)
        except EnvadError as exc:
            status = f"{exc.code}: {exc}"
    if args.json:
        print_json({"server": args.server, "service": service, "status": status,
                    "serving": status == "SERVING"})
    else:
        print(status)
    return 0 if status == "SERVING" else 1
