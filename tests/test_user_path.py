"""The README's path from a camera folder to a list of anomalies, run as written on a
generated folder of nested JPEGs with EXIF times: with a real `envad serve` and store,
and as the one-shot `envad scan` on the same folder; both fit on the same images and
rank the odd ones first."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

import pytest

from camera_folder import make_camera_folder, shot_time
from envad.client import EnvadClient
from envad.client.cli import main

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## From a camera folder to a list of anomalies"


def readme_commands() -> list[list[str]]:
    """The `envad` command lines of the section's bash blocks, comments dropped."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines = [line.split("#", 1)[0].strip()
             for block in re.findall(r"```bash\n(.*?)```", section, re.S)
             for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("envad ")]


def read_jsonl(path: Path) -> dict[str, dict]:
    records = [json.loads(line) for line in path.read_text().splitlines() if line]
    return {record["key"]: record for record in records}


def read_csv(path: Path) -> dict[str, dict]:
    with path.open(newline="") as f:
        return {row["key"]: row for row in csv.DictReader(f)}


@pytest.fixture
def mycams(tmp_path) -> Path:
    return make_camera_folder(tmp_path / "mycams")


def test_the_readme_path_and_the_one_shot_mode(envad_server, tiny_model_path, mycams,
                                               tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    commands = readme_commands()
    names = [c[1] for c in commands]
    assert names == ["serve", "backfill", "fit", "backfill", "score", "report", "scan"], names
    assert commands[0][2:4] == ["--data-dir", "~/envad"]   # envad_server: a real `envad serve`
    server = ["--server", envad_server.address]
    (tmp_path / "new").mkdir()
    new_image = sorted(mycams.rglob("ODD_*.JPG"))[0]
    (tmp_path / "new" / "IMG_0042.JPG").write_bytes(new_image.read_bytes())

    for argv in commands[1:6]:                       # backfill, fit, score all, score, report
        assert main(argv[1:] + server + quiet(argv[1])) == 0, argv
    page = (tmp_path / "review" / "index.html").read_text()
    assert "ODD_0.JPG" in page and (tmp_path / "review" / "contact_sheet.png").is_file()

    server_scores = read_jsonl(tmp_path / "scores.jsonl")
    check_scores(server_scores, mycams)
    with EnvadClient(envad_server.address) as client:
        rows = {row["uri"]: row for batch in client.export(with_vectors=False)
                for row in batch.to_pylist()}
    assert len(rows) == 124
    for n in (0, 5, 119):
        (path,) = mycams.rglob(f"IMG_{n:04d}.JPG")
        assert rows[str(path.resolve())]["timestamp"].replace(tzinfo=None) == shot_time(n)
    assert set(rows[str(p.resolve())]["env"] for p in mycams.rglob("*.JPG")) == {
        "cam-a", "cam-b", "cam-c"}

    with EnvadClient(envad_server.address) as client:
        server_bundle = client.info().bundle
    assert server_bundle is not None and server_bundle.n_samples == 124

    scan = commands[6]
    argv = [str(tiny_model_path) if a == "encoder.onnx" else a for a in scan[1:]]
    capsys.readouterr()
    assert main(argv + ["--no-progress", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    check_scores(read_csv(tmp_path / "scores.csv"), mycams)
    # the same engine, fitted on the same images with the same detectors and space
    assert report["fit_rows"] == server_bundle.n_samples
    assert report["top"][0]["key"].rsplit("/", 1)[1].startswith("ODD_")
    assert set(server_bundle.detectors) == set(
        server_scores[next(iter(server_scores))]["detectors"])

def quiet(command: str) -> list[str]:
    return ["--no-progress"] if command in ("backfill", "fit") else []


def check_scores(scores: dict[str, dict], folder: Path) -> None:
    """Every image scored; the odd ones are the most anomalous; EXIF times carried."""
    assert len(scores) == 124 and all(r["status"] == "ok" for r in scores.values())
    ranked = sorted(scores, key=lambda k: -float(scores[k]["ensemble"]))
    assert {Path(k).name for k in ranked[:4]} == {f"ODD_{i}.JPG" for i in range(4)}
    assert scores["cam-b/day2/IMG_0001.JPG"]["timestamp"].startswith("2024-06-01T06:07:00")
