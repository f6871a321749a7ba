"""One decision per burst: events from the archive's own event ids (Camtrap DP eventIDs,
COCO Camera Traps seq_ids, a folder's or manifest's event column) or time gaps, applied
to the score outputs of a backfill through a real server, and to the review page."""

from __future__ import annotations

import csv
import json

import pytest

from client_archives import make_camtrap_dp, make_coco_camera_traps, make_folder_dataset
from envad.client import EnvadClient
from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.events import group_events
from envad.client.report import build_report
from envad.client.sources import open_source
from envad.errors import InvalidInput


def record(key, env, timestamp, ensemble=0.5, anomaly=False, archive_event=""):
    return {"key": key, "env": env, "timestamp": timestamp, "status": "ok",
            "ensemble": ensemble, "is_anomaly": anomaly, "archive_event": archive_event,
            "source": {}}


def test_time_gaps_split_bursts_per_camera() -> None:
    records = [
        record("a1", "camA", "2024-01-01T10:00:00+00:00", 0.2),
        record("b1", "camB", "2024-01-01T10:00:01+00:00", 0.3),
        record("a2", "camA", "2024-01-01T10:00:20+00:00", 0.9, anomaly=True),
        record("a3", "camA", "2024-01-01T10:05:00+00:00", 0.1),
        record("x", "camA", None, 0.4),
        {**record("f", "camA", "2024-01-01T10:00:10+00:00"), "status": "failed",
         "ensemble": None},
    ]
    grouped = {r["key"]: r for r in group_events(records, gap_s=30)}
    assert grouped["a1"]["event"] == grouped["a2"]["event"] == grouped["f"]["event"] \
        == "camA@2024-01-01T10:00:00+00:00"
    assert grouped["a1"]["event_size"] == 3
    assert grouped["a1"]["event_ensemble"] == 0.9 and grouped["a1"]["event_is_anomaly"]
    assert grouped["a3"]["event"] != grouped["a1"]["event"]
    assert grouped["a3"]["event_is_anomaly"] is False
    assert grouped["b1"]["event"].startswith("camB@")
    assert grouped["x"]["event"] == "x" and grouped["x"]["event_size"] == 1
    with pytest.raises(InvalidInput, match="event gap"):
        group_events(records, gap_s=0)


def test_camtrap_event_ids_win_over_time_gaps() -> None:
    records = [record("m0", "locA", "2024-01-02T10:00:00+00:00", 0.2, archive_event="e1"),
               record("m1", "locA", "2024-01-02T11:00:00+00:00", 0.7, archive_event="e1"),
               record("m2", "locA", "2024-01-02T10:00:01+00:00", 0.4)]
    grouped = {r["key"]: r for r in group_events(records, gap_s=60)}
    assert grouped["m0"]["event"] == grouped["m1"]["event"] == "e1"
    assert grouped["m0"]["event_ensemble"] == 0.7
    assert grouped["m2"]["event"] == "locA@2024-01-02T10:00:01+00:00"


def test_camtrap_source_names_the_event_of_each_image(tmp_path) -> None:
    items = {i.key: i for i in open_source(make_camtrap_dp(tmp_path / "pkg"))}
    assert not any("eventID" in i.extra for i in items.values())   # one owner: .event
    assert [items[k].event for k in ("dep1/m0", "dep1/m1", "dep2/m3")] == ["e1", "e1", ""]


def test_a_backfill_writes_events_and_the_report_shows_one_image_per_event(
        fitted_server, tmp_path) -> None:
    dataset = make_folder_dataset(tmp_path / "ds", per_env=4)   # timestamps days apart
    package = make_camtrap_dp(tmp_path / "pkg")
    with EnvadClient(fitted_server.address) as client:
        out = tmp_path / "pkg.csv"
        run_backfill(client, open_source(package), tmp_path / "pkg.ck",
                     BackfillOptions(scores=True, store=False), scores_out=out,
                     progress=False, event_gap_s=60)
        with out.open() as f:
            rows = {r["key"]: r for r in csv.DictReader(f)}
        assert rows["dep1/m0"]["event"] == rows["dep1/m1"]["event"] == "e1"
        assert rows["dep1/m0"]["event_size"] == "2"
        assert rows["dep1/m0"]["event_ensemble"] == str(max(
            float(rows["dep1/m0"]["ensemble"]), float(rows["dep1/m1"]["ensemble"])))

        scores = tmp_path / "ds.jsonl"
        run_backfill(client, open_source(dataset), tmp_path / "ds.ck",
                     BackfillOptions(scores=True, store=False), scores_out=scores,
                     progress=False, event_gap_s=3 * 86400)   # 2024-05-01..04: one burst
    records = [json.loads(x) for x in scores.read_text().splitlines()]
    assert {r["event_size"] for r in records} == {4}
    assert len({r["event"] for r in records}) == 2   # one per camera
    summary = build_report(scores, tmp_path / "review", top=3, neighbours=0)
    assert summary.shown == 2      # one decision per burst, not three images per camera
    assert "event cam0@" in (tmp_path / "review" / "index.html").read_text()


def test_group_events_flag(fitted_server, tmp_path, capsys) -> None:
    from envad.client.cli import main

    package = make_camtrap_dp(tmp_path / "pkg")
    out = tmp_path / "scores.jsonl"
    assert main(["backfill", str(package), "--server", fitted_server.address, "--no-store",
                 "--scores-out", str(out), "--group-events", "60", "--no-progress",
                 "--checkpoint", str(tmp_path / "ck.jsonl")]) == 0
    events = {json.loads(x)["key"]: json.loads(x)["event"] for x in out.read_text().splitlines()}
    assert events["dep1/m0"] == events["dep1/m1"] == "e1"


def test_a_folder_event_column_groups_the_scores(fitted_server, tmp_path) -> None:
    """The folder format's (and a manifest's) `event` column is what --group-events
    groups by, as a Camtrap DP eventID is: two frames of cam0 days apart, one event."""
    dataset = make_folder_dataset(tmp_path / "ds", per_env=3,
                                  events={"cam0/img0.png": "b7", "cam0/img2.png": "b7"})
    out = tmp_path / "scores.jsonl"
    with EnvadClient(fitted_server.address) as client:
        run_backfill(client, open_source(dataset), tmp_path / "ck.jsonl",
                     BackfillOptions(scores=True, store=False), scores_out=out,
                     progress=False, event_gap_s=60)
    records = {r["key"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records["cam0/img0.png"]["event"] == records["cam0/img2.png"]["event"] == "b7"
    assert records["cam0/img0.png"]["event_size"] == 2
    assert records["cam0/img0.png"]["archive_event"] == "b7"
    assert records["cam0/img1.png"]["event"] != "b7"
    assert records["cam0/img1.png"]["archive_event"] == ""


def test_a_finished_runs_checkpoint_keeps_its_events_when_taken_up_again(
        fitted_server, tmp_path) -> None:
    """The events are kept with each checkpoint item: running the same scoring command
    again writes the output from the checkpoint, grouped by the same events."""
    package = make_camtrap_dp(tmp_path / "pkg")
    checkpoint = tmp_path / "ck.jsonl"
    options = BackfillOptions(scores=True, store=False)
    with EnvadClient(fitted_server.address) as client:
        run_backfill(client, open_source(package), checkpoint, options,
                     scores_out=tmp_path / "first.jsonl", progress=False)
        items = [x["item"] for x in map(json.loads, checkpoint.read_text().splitlines())
                 if x.get("item")]
        assert {item.get("event") for item in items} >= {"e1"}
        out = tmp_path / "again.jsonl"
        summary = run_backfill(client, open_source(package), checkpoint, options,
                               scores_out=out, progress=False, event_gap_s=60)
    assert summary.already_done == len(items)
    events = {r["key"]: r["event"] for r in map(json.loads, out.read_text().splitlines())}
    assert events["dep1/m0"] == events["dep1/m1"] == "e1"


def test_bad_event_options_are_refused_before_the_run(fitted_server, tmp_path) -> None:
    package = make_camtrap_dp(tmp_path / "pkg")
    with EnvadClient(fitted_server.address) as client:
        for gap, out in ((-1.0, tmp_path / "s.jsonl"), (60.0, None)):
            with pytest.raises(InvalidInput, match="--group-events"):
                run_backfill(client, open_source(package), tmp_path / "ck.jsonl",
                             BackfillOptions(scores=True, store=False), scores_out=out,
                             progress=False, event_gap_s=gap)
    assert not (tmp_path / "ck.jsonl").exists()


def test_coco_camera_traps_sequences_are_the_events(tmp_path) -> None:
    items = list(open_source(make_coco_camera_traps(tmp_path / "cct")))
    records = [{"key": i.key, "env": i.env, "status": "ok", "ensemble": float(n),
                "timestamp": i.timestamp.isoformat() if i.timestamp else None,
                "archive_event": i.event, "source": dict(i.extra)}
               for n, i in enumerate(items)]
    grouped = {r["key"]: r for r in group_events(records, gap_s=3600 * 48)}
    # 102 and 103 are 14 hours apart on one camera: chained by time, but their
    # sequences keep them apart
    assert [grouped[k]["event"] for k in ("100", "101", "102", "103")] == ["s1", "s1", "s2", "s3"]
    assert grouped["100"]["event_size"] == 2 and grouped["100"]["event_ensemble"] == 1.0
    assert grouped["104"]["event"] == "104"
