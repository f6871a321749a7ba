"""Scoring an archive again (client/backfill.py, backfill_plan.py, checkpoint.py): the
scoring job is one run per detector bundle; a refit scores again with the same command,
new images are picked up, --resume continues only an interrupted run of the same bundle.
Failures are grouped by the class of error, each file keeping its own reason
(backfill_report.py). Camtrap DP paths written on Windows resolve (sources/base.py)."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from client_archives import make_camtrap_dp, make_image_tree, png_bytes, write_csv
from envad.client import EnvadClient
from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.backfill_report import BackfillSummary, reason_class
from envad.client.checkpoint import Outcome
from envad.client.results import RowFilter
from envad.client.sources import open_source

SCORE_ONLY = BackfillOptions(scores=True, store=False)


def backfill_cli(server, tree: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """The README's scoring step: `envad backfill DIR --no-store --scores-out FILE`."""
    return subprocess.run(
        [sys.executable, "-m", "envad.client.cli", "backfill", str(tree), "--server",
         server.address, "--no-store", "--scores-out", str(out), "--no-progress", *extra],
        capture_output=True, text=True, timeout=120)


def summary_of(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def refit(server, seed: int) -> str:
    with EnvadClient(server.address) as client:
        before = client.info().bundle.bundle_id
        fit = client.fit(RowFilter(splits=("train",)), detectors=("KNN", "LOF5"), seed=seed)
    assert fit.bundle_id != before
    return fit.bundle_id


def test_the_same_command_scores_again_after_a_refit(fitted_server, tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree", per_env=3)
    out = tmp_path / "scores.jsonl"
    with EnvadClient(fitted_server.address) as client:
        first_bundle = client.info().bundle.bundle_id

    first = summary_of(backfill_cli(fitted_server, tree, out, "--json"))
    assert (first["run"], first["bundle_id"], first["ok"]) == ("new", first_bundle, 6)
    assert {r["bundle_id"] for r in jsonl(out)} == {first_bundle}

    # the same command again, and another output format: renderings of the same run
    again = summary_of(backfill_cli(fitted_server, tree, out, "--json"))
    assert (again["run"], again["ok"], again["already_done"]) == ("rerun", 0, 6)
    as_csv = summary_of(backfill_cli(fitted_server, tree, tmp_path / "scores.csv", "--json"))
    assert (as_csv["run"], as_csv["ok"], as_csv["scores_written"]) == ("rerun", 0, 6)
    with (tmp_path / "scores.csv").open() as f:
        assert {row["bundle_id"] for row in csv.DictReader(f)} == {first_bundle}

    second_bundle = refit(fitted_server, seed=1)
    result = backfill_cli(fitted_server, tree, out)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert f"scored 6 images with bundle {second_bundle}" in result.stdout
    records = jsonl(out)
    assert len(records) == 6 and {r["bundle_id"] for r in records} == {second_bundle}
    assert all(r["status"] == "ok" for r in records)
    as_json = summary_of(backfill_cli(fitted_server, tree, tmp_path / "scores.json", "--json"))
    assert as_json["run"] == "rerun" and as_json["bundle_id"] == second_bundle
    doc = json.loads((tmp_path / "scores.json").read_text())
    assert {i["envad"]["bundle_id"] for i in doc["images"]} == {second_bundle}

    # images added to the folder are scored by the same command, the others are not
    (tree / "siteC").mkdir()
    for n in range(2):
        (tree / "siteC" / f"NEW_{n}.png").write_bytes(png_bytes(5000 + n))
    result = backfill_cli(fitted_server, tree, out)
    assert result.returncode == 0, result.stderr
    assert "2 new images since the last run" in result.stdout
    records = jsonl(out)
    assert len(records) == 8 and {r["bundle_id"] for r in records} == {second_bundle}


def test_resume_continues_an_interrupted_run_of_the_same_bundle(fitted_server,
                                                               tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree", per_env=4)
    out = tmp_path / "scores.jsonl"
    checkpoint = tmp_path / "ck.jsonl"
    with EnvadClient(fitted_server.address) as client:
        bundle = client.info().bundle.bundle_id
    summary_of(backfill_cli(fitted_server, tree, out, "--checkpoint", str(checkpoint),
                            "--json", "--batch-size", "2", "--concurrency", "1"))
    # as a kill -9 leaves it: the end-of-run marker and the last batch never written
    lines = checkpoint.read_text().splitlines()
    assert json.loads(lines[-1]) == {"complete": True}
    checkpoint.write_text("\n".join(lines[:-3]) + "\n")

    refused = backfill_cli(fitted_server, tree, out, "--checkpoint", str(checkpoint))
    assert refused.returncode != 0 and "pass --resume" in refused.stderr
    resumed = summary_of(backfill_cli(fitted_server, tree, out, "--checkpoint",
                                      str(checkpoint), "--resume", "--json"))
    assert (resumed["run"], resumed["bundle_id"]) == ("resumed", bundle)
    assert (resumed["already_done"], resumed["ok"]) == (6, 2)
    records = jsonl(out)
    assert len(records) == 8 and {r["bundle_id"] for r in records} == {bundle}

    # after a refit, --resume does not continue the old bundle's run
    new_bundle = refit(fitted_server, seed=2)
    mismatch = backfill_cli(fitted_server, tree, out, "--checkpoint", str(checkpoint),
                            "--resume")
    assert mismatch.returncode != 0
    assert bundle in mismatch.stderr and new_bundle in mismatch.stderr
    fresh = summary_of(backfill_cli(fitted_server, tree, out, "--resume", "--json"))
    assert (fresh["run"], fresh["bundle_id"], fresh["ok"]) == ("new", new_bundle, 8)
    assert {r["bundle_id"] for r in jsonl(out)} == {new_bundle}


def test_a_limited_run_is_unfinished_and_resumes(fitted_server, tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree", per_env=3)
    checkpoint = tmp_path / "ck.jsonl"
    with EnvadClient(fitted_server.address) as client:
        run_backfill(client, open_source(tree), checkpoint,
                     BackfillOptions(scores=True, store=False, limit=2), progress=False)
        resumed = run_backfill(client, open_source(tree), checkpoint, SCORE_ONLY,
                               resume=True, scores_out=tmp_path / "s.jsonl", progress=False)
    assert (resumed.run, resumed.already_done, resumed.ok) == ("resumed", 2, 4)
    assert "resumed the interrupted run of bundle" in resumed.format()


# ------------------------------------------------------------------ failures by reason


def test_forty_corrupt_files_are_one_reason(envad_server, tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree")
    for n in range(40):
        (tree / "siteA" / f"BAD_{n:02d}.png").write_bytes(b"\x89PNG not really %d" % n)
    with EnvadClient(envad_server.address) as client:
        summary = run_backfill(client, open_source(tree), tmp_path / "ck.jsonl",
                               BackfillOptions(batch_size=16), progress=False)
    assert summary.ok == 4 and summary.failed == 40
    assert dict(summary.failed_reasons) == {
        "INVALID_ARGUMENT: not an image format envad can read": 40}
    (group,) = summary.as_dict()["failed_groups"]
    assert group["count"] == 40 and len(group["files"]) == 3
    assert all(f["key"].startswith("siteA/BAD_") for f in group["files"])
    text = summary.format()
    assert text.count("not an image format") == 4     # the group, and its first 3 files
    assert "... and 37 more" in text


def test_a_batch_of_only_bad_files_gives_each_file_its_own_reason(fitted_server,
                                                                  tmp_path) -> None:
    tree = tmp_path / "tree"
    (tree / "cam").mkdir(parents=True)
    bad = {"cam/A.png": b"not an image at all",
           "cam/B.png": png_bytes(1)[:40],            # a truncated PNG
           "cam/C.png": b"GIF89a broken"}
    for key, data in bad.items():
        (tree / key).write_bytes(data)
    out = tmp_path / "scores.json"
    with EnvadClient(fitted_server.address) as client:
        summary = run_backfill(client, open_source(tree), tmp_path / "ck.jsonl", SCORE_ONLY,
                               scores_out=out, progress=False)
    assert summary.failed == 3
    images = {i["file"]: i for i in json.loads(out.read_text())["images"]}
    for key, data in bad.items():
        own = hashlib.sha256(data).hexdigest()
        failure = images[key]["failure"]
        assert own in failure and "; " not in failure, failure
        assert not any(hashlib.sha256(d).hexdigest() in failure
                       for k, d in bad.items() if k != key)


def test_scan_names_its_failures(tiny_model_path, tmp_path, capsys) -> None:
    from camera_folder import make_camera_folder
    from envad.client.cli import main

    folder = make_camera_folder(tmp_path / "cams", normal=30, odd=0)
    for n in range(5):
        (folder / "cam-a" / f"CORRUPT_{n}.JPG").write_bytes(b"\xff\xd8\xff broken %d" % n)
    argv = ["scan", str(folder), "--model", str(tiny_model_path), "--allow-few-rows",
            "--no-progress"]
    assert main([*argv, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["failed"] == 5
    (group,) = report["failures"]
    assert group["count"] == 5 and group["files"][0]["key"].startswith("cam-a/CORRUPT_")
    assert main(argv) == 1
    screen = capsys.readouterr().out
    assert "failed 5:" in screen and "cam-a/CORRUPT_" in screen


def test_reason_class_leaves_out_what_names_the_file() -> None:
    sha = "ab" * 32
    assert reason_class("INVALID_ARGUMENT", f"image {sha}: cannot decode image: image "
                        "file is truncated (5 bytes not processed)", [sha]) == \
        "INVALID_ARGUMENT: cannot decode image: image file is truncated"
    a = reason_class("READ_ERROR", "cannot read /x/a.jpg: [Errno 2] No such file or "
                     "directory: '/x/a.jpg'", ["a.jpg", "/x/a.jpg"])
    b = reason_class("READ_ERROR", "cannot read /y/b c.jpg: [Errno 2] No such file or "
                     "directory: '/y/b c.jpg'", ["b c.jpg", "/y/b c.jpg"])
    assert a == b == "READ_ERROR: cannot read: [Errno N] No such file or directory"
    summary = BackfillSummary()
    summary.add([Outcome(key=f"k{n}", status="failed", id=f"id{n}", code="INVALID_ARGUMENT",
                         reason=f"image id{n}: empty image data") for n in range(4)])
    assert summary.failed_reasons == {"INVALID_ARGUMENT: empty image data": 4}
    assert [f["reason"] for f in summary.failures.as_list()[0]["files"]] == [
        f"image id{n}: empty image data" for n in range(3)]


# ------------------------------------------------------------------ Camtrap DP paths


def test_camtrap_dp_windows_paths_backfill_every_image(envad_server, tmp_path) -> None:
    package = make_camtrap_dp(tmp_path / "pkg")
    media_csv = package / "media.csv"
    with media_csv.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["filePath"] = row["filePath"].replace("/", "\\")
    write_csv(media_csv, rows)
    source = open_source(package)
    assert all("\\" not in item.uri and Path(item.uri).is_file()
               for item in source if not item.skip_reason)
    with EnvadClient(envad_server.address) as client:
        summary = run_backfill(client, source, tmp_path / "ck.jsonl", progress=False)
    assert (summary.ok, summary.failed, sum(summary.skipped.values())) == (4, 0, 1)


@pytest.mark.parametrize("location", ["media\\dep1\\m0.png",
                                      "D:\\export\\pkg\\media\\dep1\\m0.png"])
def test_a_windows_path_resolves_under_the_package(tmp_path, location) -> None:
    from envad.client.sources.base import resolve_uri

    image = tmp_path / "media" / "dep1" / "m0.png"
    image.parent.mkdir(parents=True)
    image.write_bytes(png_bytes(1))
    assert resolve_uri(tmp_path, location) == str(image)


def test_score_per_item_errors_names_each_image(fitted_server) -> None:
    from envad.client.results import ImageInput
    from envad.errors import InvalidInput

    images = [ImageInput(data=b"junk %d" % n, id=f"bad-{n}") for n in range(3)]
    with EnvadClient(fitted_server.address) as client:
        with pytest.raises(InvalidInput, match="; "):
            client.score(images)
        result = client.score(images, per_item_errors=True)
    assert [r.error.message.split(":", 1)[0] for r in result.results] == [
        "image bad-0", "image bad-1", "image bad-2"]
    assert result.provenance.bundle_id
