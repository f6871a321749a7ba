"""One decision per burst: group score records into events.

A camera trap fires a burst of frames per trigger; reviewing them one by one repeats
the same decision. An event is the one the archive names for an image (the record's
`archive_event`: a Camtrap DP eventID, a COCO Camera Traps seq_id, a manifest's or
folder's `event` column; within its camera), else a run of images of the
same camera (environment) with no gap longer than `gap_s` seconds between consecutive
timestamps (`envad.event_rule`, the rule the server's Fit leaves out too). Images with
neither are events of their own. Each record gets:

- `event`: the event's id (the archive's, else "<env>@<first timestamp>");
- `event_size`: the event's number of records;
- `event_ensemble`: the highest ensemble score among the event's scored records;
- `event_is_anomaly`: whether any of them is an anomaly.

Records of crops (`--crops`) share their image's timestamp, so an image's crops always
land in one event.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timezone

import numpy as np

from envad.client.sources.base import parse_timestamp
from envad.errors import InvalidInput
from envad.event_rule import event_codes

EVENT_FIELDS = ("event", "event_size", "event_ensemble", "event_is_anomaly")


def group_events(records: Iterable[dict], gap_s: float) -> list[dict]:
    """The records, in their order, each with the event fields above."""
    if gap_s <= 0:
        raise InvalidInput(f"the event gap must be > 0 seconds, got {gap_s}")
    records = [dict(r) for r in records]
    codes, names = _assign(records, gap_s)
    members: dict[int, list[dict]] = defaultdict(list)
    for code, record in zip(codes, records, strict=True):
        members[code].append(record)
    for code, record in zip(codes, records, strict=True):
        group = members[code]
        scored = [r for r in group if r.get("status") == "ok" and r.get("ensemble") is not None]
        record["event"] = names[code]
        record["event_size"] = len(group)
        record["event_ensemble"] = max((float(r["ensemble"]) for r in scored), default=None)
        record["event_is_anomaly"] = any(bool(r.get("is_anomaly")) for r in scored) \
            if scored else None
    return records


def _assign(records: list[dict], gap_s: float) -> tuple[list[int], dict[int, str]]:
    """The event code of each record (`envad.event_rule`), and each event's id."""
    envs, times, named = [], [], []
    for record in records:
        taken = parse_timestamp(record.get("timestamp")) if record.get("timestamp") else None
        envs.append(str(record.get("env") or ""))
        times.append(taken)
        named.append(str(record.get("archive_event") or ""))
    stamps = np.array([np.datetime64(t.astimezone(timezone.utc).replace(tzinfo=None), "us")
                       if t else np.datetime64("NaT", "us") for t in times],
                      dtype="datetime64[us]")
    codes = event_codes(envs, stamps, gap_s, named).tolist()
    names: dict[int, str] = {}
    first: dict[int, datetime] = {}           # chained event -> its first frame's time
    for n, code in enumerate(codes):
        taken = times[n]
        if named[n]:
            names[code] = named[n]
        elif taken is None:
            names[code] = str(records[n].get("key"))
        elif code not in first or taken < first[code]:
            first[code] = taken
    for n, code in enumerate(codes):
        if code in first:
            names[code] = f"{envs[n]}@{first[code].isoformat()}"
    return codes, names
