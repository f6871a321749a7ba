"""Backfill through a real server: every source kind, kill -9 and resume, failures,
score outputs, a server restart in the middle."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from cancelling_proxy import CancellingProxy
from client_archives import (
    make_camtrap_dp,
    make_coco_camera_traps,
    make_folder_dataset,
    make_image_tree,
    make_megadetector_json,
    png_bytes,
)
from envad.client import EnvadClient
from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.results import RowFilter
from envad.client.sources import open_source
from envad.errors import InvalidInput

ARCHIVES: dict[str, tuple[Callable[[Path], Path], int, int]] = {
    "folder": (make_folder_dataset, 6, 0),
    "image-tree": (make_image_tree, 4, 0),
    "camtrap-dp": (make_camtrap_dp, 4, 1),      # the video is skipped
    "coco-camera-traps": (make_coco_camera_traps, 5, 0),
    "megadetector": (make_megadetector_json, 3, 1),  # the MegaDetector failure is skipped
}


def stored_ids(client: EnvadClient) -> list[str]:
    return [i for b in client.export(with_vectors=False) for i in b.column("id").to_pylist()]


@pytest.mark.parametrize("kind", sorted(ARCHIVES))
def test_each_source_kind(envad_server, tmp_path, kind) -> None:
    make, n_ok, n_skipped = ARCHIVES[kind]
    source = open_source(make(tmp_path / "archive"))
    with EnvadClient(envad_server.address) as client:
        summary = run_backfill(client, source, tmp_path / "ck.jsonl", progress=False)
        assert (summary.ok, sum(summary.skipped.values()), summary.failed) == (n_ok, n_skipped, 0)
        assert summary.inserted == n_ok
        ids = stored_ids(client)
        again = run_backfill(client, source, tmp_path / "ck.jsonl", resume=True, progress=False)
        assert again.already_done == n_ok + n_skipped and again.processed == 0
        with pytest.raises(InvalidInput, match="--resume"):
            run_backfill(client, source, tmp_path / "ck.jsonl", progress=False)
    assert len(ids) == len(set(ids)) == n_ok
    if kind == "camtrap-dp":
        assert sorted(ids) == ["dep1/m0", "dep1/m1", "dep2/m2", "dep2/m3"]
        info = EnvadClient(envad_server.address).info()
        assert info.env_counts == {"locA": 2, "Ridge": 2}
        with EnvadClient(envad_server.address) as client:   # the package's eventIDs stored
            events = {row["id"]: row["event"] for b in client.export(with_vectors=False)
                      for row in b.to_pylist()}
        assert events == {"dep1/m0": "e1", "dep1/m1": "e1", "dep2/m2": "", "dep2/m3": ""}
    if kind == "coco-camera-traps":                   # seq_ids stored as events
        with EnvadClient(envad_server.address) as client:
            rows = {row["id"]: row for b in client.export(with_vectors=False)
                    for row in b.to_pylist()}
        assert {i: r["event"] for i, r in rows.items()} == {
            "100": "s1", "101": "s1", "102": "s2", "103": "s3", "104": ""}
        assert rows["102"]["label"] == "deer;fox" and rows["104"]["timestamp"] is None


def test_killed_backfill_resumes_to_exactly_once(envad_server, tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree", envs=("c0", "c1", "c2"), per_env=40)
    checkpoint = tmp_path / "ck.jsonl"
    cmd = [sys.executable, "-m", "envad.client.cli", "backfill", str(tree), "--server",
           envad_server.address, "--checkpoint", str(checkpoint), "--batch-size", "4",
           "--concurrency", "2", "--no-progress"]
    process = subprocess.Popen(cmd + ["--rate-limit", "40"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = checkpoint.read_text().count("\n") if checkpoint.exists() else 0
        if lines > 20 or process.poll() is not None:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the backfill ended before it was killed"
    done_before = checkpoint.read_text().count("\n") - 1
    assert 0 < done_before < 120

    resumed = subprocess.run(cmd + ["--resume", "--json"], capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["already_done"] >= done_before - 8  # a torn batch at most is re-sent
    assert summary["already_done"] + summary["ok"] == 120 and summary["failed"] == 0
    with EnvadClient(envad_server.address) as client:
        ids = stored_ids(client)
        assert client.info().total_rows == 120
    counts = Counter(ids)
    assert len(counts) == 120 and set(counts.values()) == {1}


def test_failures_are_reported_and_retried_on_resume(envad_server, tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree")
    (tree / "siteA" / "broken.png").write_bytes(b"\x89PNG but not really")
    source = open_source(tree)
    with EnvadClient(envad_server.address) as client:
        summary = run_backfill(client, source, tmp_path / "ck.jsonl", progress=False)
        assert summary.ok == 4 and summary.failed == 1
        assert summary.failed_examples[0][0] == "siteA/broken.png"
        assert "INVALID_ARGUMENT" in summary.format()
        (tree / "siteA" / "broken.png").write_bytes(png_bytes(77))
        resumed = run_backfill(client, source, tmp_path / "ck.jsonl", resume=True,
                               progress=False)
        assert (resumed.already_done, resumed.ok, resumed.failed) == (4, 1, 0)


def test_a_batch_the_server_side_cancels_is_sent_again(envad_server, tmp_path) -> None:
    """An Ingest ended with CANCELLED that the backfill did not ask for (a gateway, or a
    server stopping mid-call: seen in the restart test below) is retried as an
    unavailable one, and every image is stored once."""
    tree = make_image_tree(tmp_path / "tree", envs=("c0", "c1"), per_env=6)
    proxy = CancellingProxy(envad_server.address, "Ingest", cancel_first=2)
    try:
        with EnvadClient(proxy.address, timeout=20) as client:
            summary = run_backfill(client, open_source(tree), tmp_path / "ck.jsonl",
                                   BackfillOptions(batch_size=4, concurrency=1),
                                   progress=False)
    finally:
        proxy.close()
    assert proxy.cancelled == 2
    assert summary.ok == 12 and summary.failed == 0
    with EnvadClient(envad_server.address) as client:
        assert sorted(Counter(stored_ids(client)).values()) == [1] * 12


def test_server_restart_during_backfill(envad_server, tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree", envs=("c0", "c1"), per_env=30)
    options = BackfillOptions(batch_size=3, concurrency=2, rate_limit=30)
    result = {}

    def backfill():
        try:
            with EnvadClient(envad_server.address, timeout=20) as client:
                result["summary"] = run_backfill(client, open_source(tree),
                                                 tmp_path / "ck.jsonl", options, progress=False)
        except Exception as exc:  # the test reports it below, with its type and text
            result["error"] = exc

    thread = threading.Thread(target=backfill)
    thread.start()
    time.sleep(0.6)
    envad_server.restart()
    thread.join(120)
    assert "summary" in result, f"the backfill did not finish: {result.get('error')!r}"
    summary = result["summary"]
    assert summary.ok == 60 and summary.failed == 0
    with EnvadClient(envad_server.address) as client:
        assert sorted(Counter(stored_ids(client)).values()) == [1] * 60


@pytest.fixture
def fitted(envad_server, tmp_path):
    """A server with detectors fitted on a folder dataset's train rows."""
    dataset = make_folder_dataset(tmp_path / "train", per_env=10)
    with EnvadClient(envad_server.address) as client:
        run_backfill(client, open_source(dataset), tmp_path / "train.jsonl", progress=False)
        client.fit(RowFilter(splits=("train",)), detectors=("KNN", "LOF5"),
                   allow_few_rows=True)
    return envad_server


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".json"])
def test_scores_out(fitted, tmp_path, suffix) -> None:
    md = make_megadetector_json(tmp_path / "md")
    out = tmp_path / f"scores{suffix}"
    source = open_source(md, skip_empty=True)
    with EnvadClient(fitted.address) as client:
        before = client.info().total_rows
        summary = run_backfill(client, source, tmp_path / "ck.jsonl",
                               BackfillOptions(scores=True, store=False), scores_out=out,
                               progress=False)
        assert client.info().total_rows == before  # score only: nothing stored
    assert summary.ok == 1 and sum(summary.skipped.values()) == 3
    assert summary.scores_written == 4
    if suffix == ".jsonl":
        records = {r["key"]: r for r in map(json.loads, out.read_text().splitlines())}
        scored = records["camA/a1.png"]
        assert scored["status"] == "ok" and set(scored["detectors"]) == {"KNN", "LOF5"}
        assert 0 <= scored["ensemble"] <= 1 and scored["env"] == "camA"
        assert records["camA/a2.png"]["status"] == "skipped"
    elif suffix == ".csv":
        with out.open() as f:
            rows = {r["key"]: r for r in csv.DictReader(f)}
        assert rows["camA/a1.png"]["status"] == "ok" and float(rows["camA/a1.png"]["raw_KNN"]) >= 0
        assert rows["camB/missing.png"]["reason"].startswith("megadetector failure")
    else:
        doc = json.loads(out.read_text())
        assert doc["info"]["format_version"] == "1.4" and doc["info"]["detector"] == "md_v5a.0.0.pt"
        images = {i["file"]: i for i in doc["images"]}
        assert images["camA/a1.png"]["envad"]["detectors"]["KNN"]["calibrated"] >= 0
        assert images["camA/a1.png"]["detections"][0]["conf"] == 0.93
        assert images["camA/a2.png"] == {"file": "camA/a2.png", "detections": []}
        assert images["camB/missing.png"]["failure"].startswith("megadetector failure")
        assert images["camB/missing.png"]["detections"] is None


def test_score_and_store_through_the_cli(fitted, tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree")
    out = tmp_path / "scores.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "envad.client.cli", "backfill", str(tree), "--server",
         fitted.address, "--scores-out", str(out), "--checkpoint", str(tmp_path / "ck.jsonl"),
         "--no-progress"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ingested     4" in result.stdout
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(records) == 4 and all(r["status"] == "ok" for r in records)
    with EnvadClient(fitted.address) as client:
        assert client.info().env_counts.get("siteA") == 2


def test_ctrl_c_prints_the_summary_and_resume_finishes(envad_server, tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree", envs=("c0", "c1"), per_env=40,
                           seed0=7000)   # content no other test stores on the shared server
    checkpoint = tmp_path / "ck.jsonl"
    cmd = [sys.executable, "-m", "envad.client.cli", "backfill", str(tree), "--server",
           envad_server.address, "--checkpoint", str(checkpoint), "--batch-size", "4",
           "--concurrency", "2", "--no-progress"]
    # the child gets Ctrl-C's default disposition even if something in this test process
    # set SIGINT to ignored (an ignored signal is inherited across exec, and Python then
    # installs no KeyboardInterrupt handler)
    process = subprocess.Popen(cmd + ["--rate-limit", "8"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if checkpoint.exists() and checkpoint.read_text().count("\n") > 12:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, (out, err)
    assert "INTERRUPTED" in out and "envad: interrupted" in err
    recorded = checkpoint.read_text().count("\n") - 1
    resumed = subprocess.run(cmd + ["--resume", "--json"], capture_output=True, text=True,
                             timeout=120)
    summary = json.loads(resumed.stdout)
    assert summary["already_done"] == recorded and summary["already_done"] + summary["ok"] == 80
