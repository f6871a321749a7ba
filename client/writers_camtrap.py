"""Camtrap DP 1.0 observations out: the anomaly score of each image as a machine
observation, to add to the package the images came from.

One row per scored image, in the columns of the Camtrap DP 1.0 observations table:
`observationLevel` media, `observationType` unclassified (envad says how unusual an image
is, not what is on it), `classificationMethod` machine, `classifiedBy` "envad <model id>",
`classificationProbability` the ensemble score (0..1, higher = more anomalous),
`classificationTimestamp` when the file was written, and `observationTags`
"envad:anomaly:true|false", "envad:threshold:<t>", "envad:bundle:<bundle id>" (and
"filePublic:false" for non-public media). The image's timestamp is the event start and
end; `eventID` is the package's (or, with --group-events, the burst's:
envad.client.events). Failed and skipped images get no row. Only a Camtrap DP source
names the deploymentID and mediaID the rows refer to, so other sources are refused.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

from envad.client.sources.base import parse_timestamp
from envad.client.writers import ScoreRecord, register_writer
from envad.errors import InvalidInput

#: The Camtrap DP 1.0 observations table's fields, in its order.
OBSERVATION_FIELDS = (
    "observationID", "deploymentID", "mediaID", "eventID", "eventStart", "eventEnd",
    "observationLevel", "observationType", "cameraSetupType", "scientificName", "count",
    "lifeStage", "sex", "behavior", "individualID", "individualPositionRadius",
    "individualPositionAngle", "individualSpeed", "bboxX", "bboxY", "bboxWidth",
    "bboxHeight", "classificationMethod", "classifiedBy", "classificationTimestamp",
    "classificationProbability", "observationTags", "observationComments",
)
OBSERVATION_ID_PREFIX = "envad-"
COMMENT = ("envad anomaly score: classificationProbability is the ensemble of the "
           "detectors' calibrated scores (0..1, higher = more anomalous)")


@register_writer("camtrap-dp")
def write_camtrap_observations(
    path: Path, records: Callable[[], Iterable[ScoreRecord]], info: dict
) -> int:
    """observations.csv rows for the scored images; returns the number of records read."""
    written_at = _camtrap_time(datetime.now(timezone.utc))
    n = 0
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=OBSERVATION_FIELDS)
        writer.writeheader()
        for record in records():
            n += 1
            if record.get("status") == "ok" and record.get("ensemble") is not None:
                writer.writerow(observation_row(record, written_at))
    return n


def observation_row(record: ScoreRecord, classified_at: str) -> dict[str, object]:
    """The observation of one scored image (see the module docstring)."""
    source = record.get("source") or {}
    if not source.get("deploymentID") or not source.get("mediaID"):
        raise InvalidInput(
            f"{record.get('key')}: Camtrap DP observations need a Camtrap DP source "
            "(deploymentID and mediaID); use .jsonl, .csv or .json for other sources")
    taken = parse_timestamp(record.get("timestamp"))
    if taken is None:
        raise InvalidInput(f"{record.get('key')}: no timestamp; a Camtrap DP observation "
                           "needs eventStart")
    tags = [f"envad:anomaly:{'true' if record.get('is_anomaly') else 'false'}",
            f"envad:threshold:{record.get('threshold')}",
            f"envad:bundle:{record.get('bundle_id', '')}"]
    if source.get("filePublic") is False:
        tags.append("filePublic:false")
    row: dict[str, object] = dict.fromkeys(OBSERVATION_FIELDS, "")
    row.update({
        "observationID": f"{OBSERVATION_ID_PREFIX}{source['mediaID']}",
        "deploymentID": source["deploymentID"],
        "mediaID": source["mediaID"],
        "eventID": str(record.get("event") or record.get("archive_event") or ""),
        "eventStart": _camtrap_time(taken),
        "eventEnd": _camtrap_time(taken),
        "observationLevel": "media",
        "observationType": "unclassified",
        "classificationMethod": "machine",
        "classifiedBy": f"envad {record.get('model_id', '')}".strip(),
        "classificationTimestamp": classified_at,
        "classificationProbability": round(float(record["ensemble"]), 6),
        "observationTags": "|".join(tags),
        "observationComments": COMMENT,
    })
    return row


def _camtrap_time(moment: datetime) -> str:
    """ISO 8601 with an offset, as the schema's `%Y-%m-%dT%H:%M:%S%z` format reads it."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
