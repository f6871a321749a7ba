"""`envad report SCORES.jsonl`: write the static review page of a scored archive
(envad.client.report)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

EXAMPLES = """examples:
  envad backfill mycams --scores-out scores.jsonl
  envad report scores.jsonl --out review/            then open review/index.html
  envad report scores.jsonl --out review/ --top 25 --neighbours 6
  envad report scores.jsonl --out review/ --neighbours 0   no server needed
  envad label --normal --ids-from review/review.csv  after deleting the real anomalies
"""


def register(subparsers, connection_parser) -> None:
    p = subparsers.add_parser(
        "report", parents=[connection_parser()],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="write a static HTML review page of the most anomalous images per camera",
        description="Read the scores a backfill wrote (--scores-out scores.jsonl) and write "
                    "OUT/index.html (per camera: a score histogram and the top images with "
                    "score, detector votes and nearest normal neighbours from the server), "
                    "OUT/contact_sheet.png and OUT/review.csv (the ids shown, for "
                    "`envad label`). The page needs no server to view.",
        epilog=EXAMPLES)
    p.add_argument("scores", type=Path, metavar="SCORES.jsonl",
                   help="scores written by `envad backfill --scores-out`")
    p.add_argument("--out", type=Path, default=Path("envad-report"),
                   help="folder to write the page into (default: envad-report)")
    p.add_argument("--top", type=int, default=10,
                   help="images shown per camera (default: 10)")
    p.add_argument("--neighbours", type=int, default=4,
                   help="nearest normal neighbours per image, from the server "
                        "(default: 4; 0: no server needed)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from envad.client.commands import open_client
    from envad.client.report import build_report

    if args.neighbours > 0:
        with open_client(args) as client:
            summary = build_report(args.scores, args.out, top=args.top,
                                   neighbours=args.neighbours, client=client)
    else:
        summary = build_report(args.scores, args.out, top=args.top, neighbours=0)
    if args.json:
        json.dump(dataclasses.asdict(summary), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"review page   {summary.page} ({summary.shown} of {summary.images} images, "
              f"{summary.cameras} camera(s))")
        print(f"contact sheet {summary.contact_sheet}")
        print(f"review list   {summary.review_csv}")
    return 0
