"""`envad scan FOLDER --model ENCODER.onnx`: the one-shot mode, no server to run."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def register(subparsers) -> None:
    from envad.client.cli_help import EnvadHelpFormatter
    from envad.client.source_options import add_source_arguments

    p = subparsers.add_parser(
        "scan", formatter_class=EnvadHelpFormatter,
        help="one-shot: embed a folder, fit on its normals, score it (no server needed)",
        description="Answer for one archive without running a server: embed every image "
                    "of SOURCE with ENCODER.onnx into an embedded store, fit the detectors "
                    "on the folder's normal images (its images marked normal, else all of "
                    "them; or on --reference), score every image and list the most "
                    "anomalous. Runs the scoring service's own code in this process "
                    "(private loopback port, one-time token); nothing keeps running. "
                    "SOURCE is any `envad backfill` source (image tree, folder format, "
                    "Camtrap DP, MegaDetector JSON, manifest), read with the same source "
                    "options as `envad backfill` (they apply to SOURCE and REF alike). "
                    "Every image is embedded once.")
    p.add_argument("source", type=Path, metavar="SOURCE", help="archive folder or file")
    p.add_argument("--model", type=Path, required=True, metavar="ENCODER.onnx",
                   help="envad encoder file (docs/model-format.md)")
    p.add_argument("--reference", type=Path, metavar="REF",
                   help="fit on this archive of normal images instead of SOURCE's normals")
    add_source_arguments(p, set_split=False)
    p.add_argument("--data-dir", type=Path,
                   help="keep the store, detectors and work files here and reuse them on the "
                        "next run (default: a temporary folder, removed at the end)")
    p.add_argument("--scores-out", type=Path, metavar="FILE",
                   help="write every image's scores: .jsonl, .csv or .json (MegaDetector "
                        "1.4), as `envad backfill --scores-out` (default: "
                        "DATA_DIR/scores.jsonl with --data-dir, else none)")
    p.add_argument("--top", type=int, default=20,
                   help="how many of the most anomalous images to list")
    p.add_argument("--detectors", default="",
                   help="comma-separated detector names (default: the default pipeline's "
                        "set, KNN today)")
    p.add_argument("--space", default="",
                   help="space step (default: the default pipeline's; see docs/detectors.md)")
    p.add_argument("--score-adaptation", default="",
                   help="camera[:P] or none: put each camera's scores on the fit set's "
                        "scale (default: the default pipeline's; see docs/detectors.md)")
    p.add_argument("--contamination", type=float, default=0.0,
                   help="expected anomaly rate of the fit rows; sets the threshold "
                        "(default: 0.05)")
    p.add_argument("--allow-few-rows", action="store_true",
                   help="fit even on fewer than 100 normal images (with a warning)")
    p.add_argument("--event-gap", type=float, default=0.0, metavar="SECONDS",
                   help="fit rows of a camera at most SECONDS apart are one event (a "
                        "burst); scoring a fit row, KNN and KDE leave its whole event out "
                        "(default 0: the server's, 60 s; negative: only the row itself)")
    p.add_argument("--batch-size", type=int, default=64, help="images per call")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_scan)


def cmd_scan(args) -> int:
    from envad.client.scan import ScanOptions, run_scan
    from envad.client.source_options import source_options

    options = ScanOptions(
        source=args.source, model=args.model, reference=args.reference,
        source_format=args.source_format, source_options=source_options(args),
        envs=tuple(args.only_env), splits=tuple(args.only_split), data_dir=args.data_dir,
        scores_out=args.scores_out, top=args.top,
        detectors=tuple(d.strip() for d in args.detectors.split(",") if d.strip()),
        space=args.space, score_adaptation=args.score_adaptation,
        contamination=args.contamination, allow_few_rows=args.allow_few_rows,
        event_gap_s=args.event_gap,
        batch_size=args.batch_size,
        progress=not args.no_progress,
    )
    report = run_scan(options)
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(report.format())
    return 1 if report.failed else 0
