"""`envad label`: the review loop's write side. Mark stored rows as normal (a false
alarm) or anomaly (a real one), by id or from a CSV of ids such as `envad report`'s
review.csv; the next `envad fit` honours the labels (server/review.py)."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from envad.errors import InvalidInput
from envad.records import ANOMALY_LABEL, NORMAL_LABEL

EXAMPLES = """examples:
  envad label --normal 3f1a9c0e... 77b2d4aa...     mark two false alarms as normal
  envad label --anomaly --ids-from review.csv      every id in review.csv's id column
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
    p.add_argument("ids", nargs="*", metavar="ID", help="stored row ids")
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
    from envad.client.commands import open_client, print_json

    ids = list(args.ids)
    if args.ids_from is not None:
        ids += ids_from_csv(args.ids_from, args.id_column)
    ids = list(dict.fromkeys(ids))
    if not ids:
        raise InvalidInput("envad label: no ids given (pass IDs or --ids-from FILE.csv)")
    with open_client(args) as client:
        result = client.set_label(ids, args.label, timeout=args.timeout)
    if args.json:
        print_json(result)
    else:
        print(f"labelled {len(result.updated)} row(s) {args.label!r}")
        if result.missing:
            shown = ", ".join(result.missing[:5]) + (" ..." if len(result.missing) > 5 else "")
            print(f"{len(result.missing)} id(s) not stored: {shown}", file=sys.stderr)
    return 1 if result.missing else 0
