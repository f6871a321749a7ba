"""Per-image score outputs of a backfill: JSON lines, CSV, MegaDetector batch JSON, or
Camtrap DP observations (envad.client.writers_camtrap).

Every writer takes the same score records (plain dicts, see `ScoreRecord` fields below)
and writes atomically (temporary file + rename), so a reader never sees half a file.

Record fields: key, id, env, label, split, uri, timestamp (ISO 8601 or None),
archive_event (the event the archive names for the image, stored with its row: a
Camtrap DP eventID, a COCO Camera Traps seq_id, a manifest's `event`; "" for none), status
("ok", "failed", "skipped"), code, reason, ensemble, is_anomaly, threshold, detectors
({name: {"raw": float, "adapted": float, "calibrated": float}}), model_id, bundle_id,
space (the bundle's space step), adaptation (how it placed the camera: fit, camera,
global), score_adaptation (the bundle's, e.g. camera(prior_rows=16)), camera_weight (the
weight of the camera's own score statistics in "adapted"), source (the source's extra
values, e.g. {"is_anomaly": true}, MegaDetector "detections", Camtrap DP "deploymentID",
"mediaID" and "filePublic"), and when grouped
into events (envad.client.events) event, event_size, event_ensemble, event_is_anomaly.

The MegaDetector format (Timelapse, AddaxAI) is written by
envad.client.writers_megadetector, Camtrap DP observations by envad.client.writers_camtrap.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from envad.client.events import EVENT_FIELDS
from envad.errors import InvalidInput

ScoreRecord = dict
BASE_COLUMNS = (
    "key", "id", "env", "label", "split", "uri", "timestamp", "archive_event", "status",
    "code", "reason", "ensemble", "is_anomaly", "threshold", "model_id", "bundle_id",
    "space", "adaptation", "score_adaptation", "camera_weight",
)
SCORE_SEMANTICS = (
    "higher = more anomalous; 'raw' is the detector's own score, 'adapted' that score on "
    "the fit set's scale for the image's camera, 'calibrated' the percentile of 'adapted' "
    "among the detector bundle's fit-set scores in [0, 1]; 'ensemble' is the "
    "mean calibrated score and 'is_anomaly' is ensemble >= threshold"
)

Writer = Callable[[Path, Callable[[], Iterable[ScoreRecord]], dict], int]
WRITERS: dict[str, Writer] = {}
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".json": "megadetector"}


def register_writer(name: str) -> Callable[[Writer], Writer]:
    def add(fn: Writer) -> Writer:
        if name in WRITERS:
            raise ValueError(f"duplicate writer {name!r}")
        WRITERS[name] = fn
        return fn

    return add


def format_for(path: str | Path, fmt: str = "auto") -> str:
    """The writer name for `path`: explicit `fmt`, else from the suffix."""
    if fmt != "auto":
        if fmt not in WRITERS:
            raise InvalidInput(f"unknown scores format {fmt!r}; known: {sorted(WRITERS)}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise InvalidInput(
            f"cannot tell the scores format of {path}: use a .jsonl, .csv or .json "
            f"(MegaDetector) name, or pass --scores-format {sorted(WRITERS)}"
        )
    return SUFFIXES[suffix]


def write_scores(
    path: str | Path,
    records: Callable[[], Iterable[ScoreRecord]],
    fmt: str = "auto",
    info: dict | None = None,
) -> int:
    """Write score records to `path` atomically; returns the number of records.

    `records` is called once per pass (CSV needs two: columns first), so it should
    re-read its source rather than return a one-shot iterator.
    """
    path = Path(path)
    writer = WRITERS[format_for(path, fmt)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:
        n = writer(tmp, records, info or {})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return n


@register_writer("jsonl")
def write_jsonl(path: Path, records: Callable[[], Iterable[ScoreRecord]], info: dict) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for record in records():
            f.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
            n += 1
    return n


@register_writer("csv")
def write_csv(path: Path, records: Callable[[], Iterable[ScoreRecord]], info: dict) -> int:
    """One row per image: base columns (and the event columns when the records were
    grouped into events), then raw_<detector>, adapted_<detector> and cal_<detector> per
    detector, then
    source_<name> for each scalar source value."""
    detectors: dict[str, None] = {}
    source_keys: dict[str, None] = {}
    base = list(BASE_COLUMNS)
    for record in records():
        if "event" in record and "event" not in base:
            base += EVENT_FIELDS
        detectors.update(dict.fromkeys(record.get("detectors") or {}))
        for k, v in (record.get("source") or {}).items():
            if v is None or isinstance(v, (str, int, float, bool)):
                source_keys[k] = None
    columns = (
        base
        + [f"raw_{d}" for d in detectors]
        + [f"adapted_{d}" for d in detectors]
        + [f"cal_{d}" for d in detectors]
        + [f"source_{k}" for k in source_keys]
    )
    n = 0
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for record in records():
            row = {c: _csv_value(record.get(c)) for c in base}
            for name, score in (record.get("detectors") or {}).items():
                row[f"raw_{name}"] = score["raw"]
                row[f"adapted_{name}"] = score.get("adapted", score["raw"])
                row[f"cal_{name}"] = score["calibrated"]
            for k in source_keys:
                row[f"source_{k}"] = _csv_value((record.get("source") or {}).get(k))
            writer.writerow(row)
            n += 1
    return n


def _csv_value(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


# the other formats register themselves on import
from envad.client import writers_camtrap, writers_megadetector  # noqa: E402,F401
