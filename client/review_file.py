"""review.csv, the file the review page downloads: the images a reviewer marked, one row
each (id, verdict, env, file), and the label each verdict becomes.

`false_alarm` (the image shows nothing new) becomes the label `normal`, `new_content`
(a real anomaly) becomes `anomaly`; `normal` and `anomaly` are accepted as they are.
`envad label --from review.csv` applies the file (client/label_command.py).
"""

from __future__ import annotations

import csv
from pathlib import Path

from envad.errors import InvalidInput
from envad.records import ANOMALY_LABEL, NORMAL_LABEL

FALSE_ALARM, NEW_CONTENT = "false_alarm", "new_content"
LABEL_OF_VERDICT = {FALSE_ALARM: NORMAL_LABEL, NEW_CONTENT: ANOMALY_LABEL,
                    NORMAL_LABEL: NORMAL_LABEL, ANOMALY_LABEL: ANOMALY_LABEL}


def read_review(path: Path) -> dict[str, list[str]]:
    """{label: ids} of a review file, in file order; an id given two different verdicts
    is an error (the reviewer must decide)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            missing = {"id", "verdict"} - set(reader.fieldnames or [])
            if missing:
                raise InvalidInput(f"{path} is not a review file: no {sorted(missing)} "
                                   "column(s) (the review page's download has id,verdict)")
            rows = [(n, (r["id"] or "").strip(), (r["verdict"] or "").strip().lower())
                    for n, r in enumerate(reader, start=2)]
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    verdict_of: dict[str, str] = {}
    for line, id, verdict in rows:
        if not id:
            continue
        if verdict.replace(" ", "_") not in LABEL_OF_VERDICT:
            raise InvalidInput(f"{path}:{line}: verdict {verdict!r} is none of "
                               f"{sorted(LABEL_OF_VERDICT)}")
        label = LABEL_OF_VERDICT[verdict.replace(" ", "_")]
        if verdict_of.setdefault(id, label) != label:
            raise InvalidInput(f"{path}:{line}: {id} is marked both {verdict_of[id]} "
                               f"and {label}")
    by_label: dict[str, list[str]] = {}
    for id, label in verdict_of.items():
        by_label.setdefault(label, []).append(id)
    return by_label
