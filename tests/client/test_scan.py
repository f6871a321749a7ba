"""`envad scan` (client/scan.py): the one-shot mode on real files, with the service's
own code in process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from camera_folder import make_camera_folder
from client_archives import make_folder_dataset
from envad.client.cli import main
from envad.client.scan import ScanOptions, run_scan
from envad.errors import InvalidInput


def scan_json(capsys, *argv: str) -> dict:
    assert main(["scan", *argv, "--json", "--no-progress"]) == 0
    return json.loads(capsys.readouterr().out)


def test_scan_against_a_reference_folder(tiny_model_path, tmp_path, capsys) -> None:
    reference = make_camera_folder(tmp_path / "normals", normal=110, odd=0)
    target = make_camera_folder(tmp_path / "new", normal=10, odd=3, seed=11)
    out = tmp_path / "scores.jsonl"
    report = scan_json(capsys, str(target), "--model", str(tiny_model_path), "--reference",
                       str(reference), "--scores-out", str(out), "--top", "3")
    assert report["fit_rows"] == 110 and "reference" in report["fit_on"]
    assert report["scored"] == 13 and report["failed"] == 0
    assert report["embedded"] == 110 + 13          # the reference and the archive, once each
    assert sorted(r["key"].rsplit("/", 1)[1] for r in report["top"]) == [
        "ODD_0.JPG", "ODD_1.JPG", "ODD_2.JPG"]
    assert all(r["is_anomaly"] for r in report["top"])
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 13 and all(line["timestamp"] for line in lines)


def test_every_image_is_embedded_once(tiny_model_path, tmp_path, capsys) -> None:
    """The fit pass embeds and stores every image; the scoring pass scores them from
    their stored embeddings (the service's own counter of images through the encoder)."""
    folder = make_camera_folder(tmp_path / "cams", normal=100, odd=2)
    report = scan_json(capsys, str(folder), "--model", str(tiny_model_path),
                       "--detectors", "KNN,PCA")
    assert report["scored"] == 102 and report["fit_rows"] == 102
    assert report["embedded"] == 102


def test_scan_scores_with_the_score_adaptation_asked_for(tiny_model_path, tmp_path,
                                                        capsys) -> None:
    folder = make_camera_folder(tmp_path / "cams", normal=100, odd=2)
    for setting, described in (("", "frozen(prior_rows=64)"), ("none", "none"),
                               ("camera:5", "camera(prior_rows=5)")):
        out = tmp_path / f"scores-{setting or 'default'}.jsonl"
        scan_json(capsys, str(folder), "--model", str(tiny_model_path), "--detectors",
                  "KNN", "--scores-out", str(out), "--score-adaptation", setting)
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert {line["score_adaptation"] for line in lines} == {described}
        weights = [line["camera_weight"] for line in lines]
        assert (max(weights) > 0) == (setting != "none")


def test_a_kept_data_dir_is_reused_not_doubled(tiny_model_path, tmp_path, capsys) -> None:
    folder = make_camera_folder(tmp_path / "cams", normal=100, odd=2)
    data_dir = tmp_path / "work"
    argv = [str(folder), "--model", str(tiny_model_path), "--data-dir", str(data_dir)]
    first = scan_json(capsys, *argv)
    second = scan_json(capsys, *argv)
    assert first["fit_rows"] == second["fit_rows"] == 102
    assert (data_dir / "scores.jsonl").is_file() and second["scores_out"]
    assert list((data_dir / "checkpoints").glob("scan-store-cams.jsonl"))


def test_images_the_archive_marks_as_anomalies_are_not_fit_on(tiny_model_path, tmp_path,
                                                              capsys) -> None:
    dataset = make_folder_dataset(tmp_path / "ds", per_env=60)   # label 6: anomalies
    report = scan_json(capsys, str(dataset), "--model", str(tiny_model_path),
                       "--detectors", "KNN")
    assert report["fit_rows"] == 118 and report["scored"] == 120


def test_too_few_normal_images_are_refused(tiny_model_path, tmp_path, capsys) -> None:
    folder = make_camera_folder(tmp_path / "few", normal=30, odd=1)
    assert main(["scan", str(folder), "--model", str(tiny_model_path), "--no-progress"]) == 1
    assert "--allow-few-rows" in capsys.readouterr().err
    report = scan_json(capsys, str(folder), "--model", str(tiny_model_path),
                       "--allow-few-rows")
    assert report["fit_rows"] == 31 and report["warnings"]


def test_bad_inputs_are_one_line_errors(tiny_model_path, tmp_path) -> None:
    (tmp_path / "empty" / "cam").mkdir(parents=True)
    not_a_model = tmp_path / "model.onnx"
    not_a_model.write_bytes(b"not onnx")
    folder = make_camera_folder(tmp_path / "cams", normal=3, odd=0)
    for argv, needle in [
        (["empty", "--model", str(tiny_model_path)], "holds no images"),
        (["cams", "--model", "missing.onnx"], "no such encoder file"),
        (["cams", "--model", str(not_a_model)], "model"),
    ]:
        result = subprocess.run([sys.executable, "-m", "envad.client.cli", "scan", *argv],
                                capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert result.returncode == 1, result
        assert "Traceback" not in result.stderr and needle in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert folder.is_dir()


def test_the_in_process_service_listens_on_loopback_only_with_a_token(
        tiny_model_path, tmp_path, monkeypatch) -> None:
    seen = {}
    from envad.client import scan

    real = scan._scan

    def probe(client, *args):
        host, port = client.address.rsplit(":", 1)
        seen["host"] = host
        with socket.create_connection((host, int(port)), timeout=2):
            pass
        from envad.client.library import EnvadClient
        from envad.errors import EnvadError

        with EnvadClient(client.address, token="wrong") as intruder, pytest.raises(
                EnvadError, match="UNAUTHENTICATED|token"):
            intruder.info()
        return real(client, *args)

    monkeypatch.setattr(scan, "_scan", probe)
    folder = make_camera_folder(tmp_path / "cams", normal=100, odd=1)
    report = run_scan(ScanOptions(folder, tiny_model_path, progress=False))
    assert seen["host"] == "127.0.0.1" and report.scored == 101


def test_options_are_checked(tiny_model_path, tmp_path) -> None:
    folder = make_camera_folder(tmp_path / "cams", normal=2, odd=0)
    with pytest.raises(InvalidInput):
        run_scan(ScanOptions(folder, tiny_model_path, top=-1))


def test_scan_takes_the_source_options_of_backfill(tiny_model_path, tmp_path, capsys) -> None:
    """A MegaDetector file kept apart from the images, with Windows paths: --image-root
    finds them, --env-level picks the folder level that is the camera, --only-env keeps
    one camera (the options are backfill's, envad.client.source_options)."""
    cams = make_camera_folder(tmp_path / "data" / "cams", normal=100, odd=2)
    files = sorted(p.relative_to(cams).as_posix() for p in cams.rglob("*.JPG"))
    md = tmp_path / "md" / "results.json"
    md.parent.mkdir()
    md.write_text(json.dumps({
        "info": {"format_version": "1.4"}, "detection_categories": {"1": "animal"},
        "images": [{"file": f.replace("/", "\\") if n % 2 else f,
                    "detections": [{"category": "1", "conf": 0.9, "bbox": [0.1, 0.1, 0.5, 0.5]}]}
                   for n, f in enumerate(files)]}))
    model = ["--model", str(tiny_model_path), "--detectors", "KNN"]
    out = tmp_path / "scores.jsonl"
    report = scan_json(capsys, str(md), *model, "--image-root", str(cams), "--env-level", "1",
                       "--scores-out", str(out))
    assert (report["scored"], report["failed"], report["embedded"]) == (102, 0, 102)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["env"] for r in records} == {"day1", "day2"}
    day2 = scan_json(capsys, str(md), *model, "--image-root", str(cams), "--env-level", "1",
                     "--only-env", "day2", "--allow-few-rows")
    assert day2["scored"] == day2["fit_rows"] == sum("/day2/" in f for f in files)
    # without --image-root the files are looked for beside the JSON, where they are not
    assert main(["scan", str(md), *model, "--no-progress"]) == 1
    assert "could be stored" in capsys.readouterr().err


def test_a_burst_of_new_content_in_the_archive_ranks_first(tiny_model_path, tmp_path,
                                                          capsys) -> None:
    """Eight odd frames taken 2 s apart, fitted on with the rest of the archive: each
    frame's own event is left out when it is scored, so the burst ranks 1st-8th; with
    no events (`--event-gap -1`: only the frame itself left out) its frames are each
    other's nearest neighbours and the burst ranks last."""
    folder = make_camera_folder(tmp_path / "cams", normal=100, odd=8, odd_burst_s=2)
    ranks = {}
    for gap in ("0", "-1"):
        report = scan_json(capsys, str(folder), "--model", str(tiny_model_path),
                           "--detectors", "KNN", "--top", "108", "--event-gap", gap)
        assert report["fit_rows"] == 108
        ranks[gap] = [n for n, row in enumerate(report["top"]) if "ODD_" in row["key"]]
        if gap == "0":   # normal images are 7 minutes apart: each its own event
            assert report["fit_groups"].endswith("108 rows in 101 events, largest 8")
    assert ranks["0"] == list(range(8))
    assert ranks["-1"] == list(range(100, 108))
