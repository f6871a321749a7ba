"""`envad label`: the review loop's write side. Mark stored rows as normal (a false
alarm) or anomaly (a real one): by id, unique id prefix or stored file, from a CSV of
ids, or from the review.csv the review page of `envad report` downloads (its verdicts:
client/review_file.py); the next `envad fit` honours the labels (server/review.py)."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from envad.client import label_ids
from envad.client.review_file import read_review
from envad.errors import InvalidInput
from envad.records import ANOMALY_LABEL, NORMAL_LABEL

EXAMPLES = """examples:
  envad label --from review/review.csv             the review page's verdicts: false
                                                   alarm -> normal, new content -> anomaly
  envad label --normal 3f1a9c0e 77b2d4aa           two false alarms, by unique id prefix
  envad label --normal cams/site1/IMG_0042.JPG     a stored file, by its path
  envad label --anomaly --ids-from ids.csv         every id in ids.csv's id column
  envad fit                                        refit: the labels are honoured
"""


def register(subparsers, connection_parser) -> None:
    p = subparsers.add_parser(
        "label", parents=[connection_parser()],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="mark stored images as normal or anomaly (the review loop)",
        description="Set the label of stored rows. A refit honours the review labels: "
                    "rows labelled 'anomaly' are never fit on, and rows labelled 'normal' "
                    "are fit on whenever their camera is, whatever the split filter. The "
                    "new label replaces the stored one (e.g. a species name).",
        epilog=EXAMPLES)
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--normal", dest="label", action="store_const", const=NORMAL_LABEL,
                      help="label the rows 'normal' (false alarms)")
    kind.add_argument("--anomaly", dest="label", action="store_const", const=ANOMALY_LABEL,
                      help="label the rows 'anomaly' (confirmed anomalies)")
    kind.add_argument("--set", dest="label", metavar="LABEL",
                      help="any other label (not a review label: Fit filters on it only "
                           "when asked with --label)")
    kind.add_argument("--from", dest="review_file", type=Path, metavar="REVIEW.csv",
                      help="apply the verdicts of the review page's review.csv (false "
                           "alarm: normal, new content: anomaly)")
    p.add_argument("ids", nargs="*", metavar="ID",
                   help="stored row ids, unique id prefixes (6+ characters) or stored "
                        "files (path or URL)")
    p.add_argument("--ids-from", type=Path, metavar="FILE.csv",
                   help="also every id of this CSV's id column (e.g. envad report's "
                        "review.csv)")
    p.add_argument("--id-column", default="id", help="the CSV column holding the ids "
                                                      "(default: id)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_label)


def ids_from_csv(path: Path, column: str = "id") -> list[str]:
    """The non-empty values of `column` in a CSV file, in order."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            if column not in (reader.fieldnames or []):
                raise InvalidInput(f"{path} has no {column!r} column (columns: "
                                   f"{reader.fieldnames or []}); pass --id-column")
            return [row[column].strip() for row in reader if (row[column] or "").strip()]
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc


def cmd_label(args) -> int:
    # envad.client.commands imports this module to register the command (a cycle)
    from envad.client.commands import open_client

    if args.review_file is not None:
        if args.ids or args.ids_from is not None:
            raise InvalidInput("envad label --from applies a review file on its own "
                               "(no IDs, no --ids-from)")
        wanted = read_review(args.review_file)
        if not wanted:
            raise InvalidInput(f"{args.review_file} marks no image: mark some on the "
                               "review page before downloading review.csv")
    else:
        ids = list(args.ids)
        if args.ids_from is not None:
            ids += ids_from_csv(args.ids_from, args.id_column)
        if not ids:
            raise InvalidInput("envad label: no ids given (pass IDs, --ids-from FILE.csv or "
                               "--from review.csv)")
        wanted = {args.label: ids}
    missing = 0
    with open_client(args) as client:
        if label_ids.needs_lookup([t for ids in wanted.values() for t in ids]):
            stored = label_ids.stored_rows(client, timeout=args.timeout)
            wanted = {label: label_ids.resolve(ids, *stored) for label, ids in wanted.items()}
        for label, ids in wanted.items():
            result = client.set_label(list(dict.fromkeys(ids)), label, timeout=args.timeout)
            missing += len(result.missing)
            _print_result(args, result, label)
    return 1 if missing else 0


def _print_result(args, result, label: str) -> None:
    # envad.client.commands imports this module to register the command (a cycle)
    from envad.client.commands import print_json

    if args.json:
        print_json(result)
        return
    print(f"labelled {len(result.updated)} row(s) {label!r}")
    if result.missing:
        shown = ", ".join(result.missing[:5]) + (" ..." if len(result.missing) > 5 else "")
        print(f"{len(result.missing)} id(s) not stored: {shown}", file=sys.stderr)
