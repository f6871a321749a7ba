"""One decision per burst: group score records into events.

A camera trap fires a burst of frames per trigger; reviewing them one by one repeats
the same decision. An event is the Camtrap DP `eventID` of an image when its package
names one, else a run of images of the same camera (environment) with no gap longer
than `gap_s` seconds between consecutive timestamps (`envad.event_rule`, the rule the
server's Fit leaves out too). Images without a timestamp are events of their own. Each
record gets:

- `event`: the event's id (the eventID, else "<env>@<first timestamp>");
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
    event_of = _assign(records, gap_s)
    members: dict[str, list[dict]] = defaultdict(list)
    for n, record in enumerate(records):
        members[event_of[n]].append(record)
    for n, record in enumerate(records):
        group = members[event_of[n]]
        scored = [r for r in group if r.get("status") == "ok" and r.get("ensemble") is not None]
        record["event"] = event_of[n]
        record["event_size"] = len(group)
        record["event_ensemble"] = max((float(r["ensemble"]) for r in scored), default=None)
        record["event_is_anomaly"] = any(bool(r.get("is_anomaly")) for r in scored) \
            if scored else None
    return records


def _assign(records: list[dict], gap_s: float) -> dict[int, str]:
    """Record index -> event id."""
    event_of: dict[int, str] = {}
    timed: list[tuple[int, str, datetime]] = []
    for n, record in enumerate(records):
        named = (record.get("source") or {}).get("eventID")
        taken = parse_timestamp(record.get("timestamp")) if record.get("timestamp") else None
        if named:
            event_of[n] = str(named)
        elif taken is None:
            event_of[n] = str(record.get("key"))
        else:
            timed.append((n, str(record.get("env") or ""), taken))
    if not timed:
        return event_of
    utc = [taken.astimezone(timezone.utc).replace(tzinfo=None) for _, _, taken in timed]
    codes = event_codes([env for _, env, _ in timed], np.array(utc, dtype="datetime64[us]"),
                        gap_s).tolist()
    first: dict[int, datetime] = {}           # event code -> its first frame's time
    for code, (_, _, taken) in zip(codes, timed, strict=True):
        if code not in first or taken < first[code]:
            first[code] = taken
    for code, (n, env, _) in zip(codes, timed, strict=True):
        event_of[n] = f"{env}@{first[code].isoformat()}"
    return event_of
