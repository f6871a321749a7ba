"""`envad scan FOLDER --model ENCODER.onnx`: the one-shot mode, no server to run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from envad.client.cli_help import EnvadHelpFormatter
from envad.client.fit_options import add_fit_options, fit_keywords
from envad.client.scan import ScanOptions, run_scan
from envad.client.source_options import add_source_arguments, source_options

#: the Fit options `envad scan` offers (client/fit_options.py declares them)
SCAN_FIT_OPTIONS = ("detectors", "space", "score_adaptation", "contamination",
                    "allow_few_rows", "event_gap")


def register(subparsers) -> None:
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
    add_fit_options(p, SCAN_FIT_OPTIONS)
    p.add_argument("--batch-size", type=int, default=64, help="images per call")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_scan)


def cmd_scan(args) -> int:
    options = ScanOptions(
        source=args.source, model=args.model, reference=args.reference,
        source_format=args.source_format, source_options=source_options(args),
        envs=tuple(args.only_env), splits=tuple(args.only_split), data_dir=args.data_dir,
        scores_out=args.scores_out, top=args.top, **fit_keywords(args),
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
