"""`envad report SCORES.jsonl`: write the static review page of a scored archive
(envad.client.report). Neighbours come from a running server, or, with `--data-dir` of
an `envad scan`, from that scan's store through the service run in this process."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from envad.client.report import build_report
from envad.client.scan import _in_process_service, _quiet_server_logs
from envad.errors import InvalidInput, Unavailable

EXAMPLES = """examples:
  envad backfill mycams --scores-out scores.jsonl
  envad report scores.jsonl --out review/            then open review/index.html
  envad report scores.jsonl --out review/ --top 25 --neighbours 6
  envad report scores.jsonl --out review/ --neighbours 0   no server needed
  envad scan cams/ --model enc.onnx --data-dir scan/
  envad report scan/scores.jsonl --out review/ --data-dir scan/   the scan's store
  then on the page: mark false alarms / new content, download review.csv, and
  envad label --from review.csv && envad fit
"""


def register(subparsers, connection_parser) -> None:
    p = subparsers.add_parser(
        "report", parents=[connection_parser()],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="write a static HTML review page of the most anomalous images per camera",
        description="Read the scores a backfill wrote (--scores-out scores.jsonl) and write "
                    "OUT/index.html (per camera: a score histogram and the top images with "
                    "score, detector votes and nearest normal neighbours from the server), "
                    "OUT/contact_sheet.png and OUT/shown.csv (the images shown). On the "
                    "page, mark images as false alarm or new content and download "
                    "review.csv for `envad label --from review.csv`. The page needs no "
                    "server to view.",
        epilog=EXAMPLES)
    p.add_argument("scores", type=Path, metavar="SCORES.jsonl",
                   help="scores written by `envad backfill --scores-out`")
    p.add_argument("--out", type=Path, default=Path("envad-report"),
                   help="folder to write the page into")
    p.add_argument("--top", type=int, default=10,
                   help="images shown per camera")
    p.add_argument("--neighbours", type=int, default=4,
                   help="nearest normal neighbours per image, from the server "
                        "(0: no server needed)")
    p.add_argument("--data-dir", type=Path, metavar="DIR",
                   help="take the neighbours from the store of `envad scan --data-dir DIR` "
                        "(no server to run)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    if args.neighbours > 0:
        with _neighbour_client(args) as client:
            summary = build_report(args.scores, args.out, top=args.top,
                                   neighbours=args.neighbours, client=client)
    else:
        summary = build_report(args.scores, args.out, top=args.top, neighbours=0)
    if args.json:
        json.dump(dataclasses.asdict(summary), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"review page   {summary.page} ({summary.shown} of {summary.images} images, "
              f"{summary.cameras} camera(s), {summary.failed} failed file(s) listed)")
        print(f"contact sheet {summary.contact_sheet}")
        print(f"shown images  {summary.shown_csv}")
    return 0


@contextlib.contextmanager
def _neighbour_client(args) -> Iterator:
    """A client for the neighbours: the scan's store with --data-dir, else the server
    (checked first, so an unreachable one is one clear error, not an empty page)."""
    # envad.client.commands imports this module to register the command (a cycle)
    from envad.client.commands import open_client

    if args.data_dir is not None:
        with _scan_store(args.data_dir) as client:
            yield client
        return
    with open_client(args) as client:
        try:
            client.info(timeout=min(args.timeout or 10.0, 10.0))
        except Unavailable as exc:
            raise Unavailable(f"no envad server at {args.server} for the neighbours ({exc}); "
                              "pass --neighbours 0 for a page without them, or --data-dir "
                              "DIR for the store of `envad scan --data-dir DIR`") from exc
        yield client


@contextlib.contextmanager
def _scan_store(data_dir: Path) -> Iterator:
    """The service over an `envad scan --data-dir` folder, run in this process."""
    models = sorted((data_dir / "models").glob("*.onnx"))
    if not models:
        raise InvalidInput(f"--data-dir {data_dir}: no envad scan store there (no "
                           "models/*.onnx); pass the folder given to `envad scan --data-dir`")
    with _quiet_server_logs(), _in_process_service(models[0], data_dir) as (client, _):
        yield client
