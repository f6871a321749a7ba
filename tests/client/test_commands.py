"""The `envad` client subcommands against a real server: score, fit, info, models,
export-embeddings, health, and --help everywhere."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from client_archives import make_folder_dataset, png_bytes
from envad.client.cli import build_parser, main
from envad.client.cli_help import subcommands

CLIENT_COMMANDS = [["score"], ["fit"], ["info"], ["models"], ["models", "list"],
                   ["models", "activate"], ["export-embeddings"], ["health"], ["backfill"],
                   ["retrain"], ["reset-camera-stats"], ["scan"], ["label"], ["report"]]


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=" ".join)
def test_help_everywhere(command, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(command + ["--help"])
    assert exit_info.value.code == 0
    assert "usage: envad " + " ".join(command) in capsys.readouterr().out


def test_every_registered_client_command_is_covered() -> None:
    parser = build_parser()
    assert parser._subparsers is not None
    choices = parser._subparsers._group_actions[0].choices
    assert isinstance(choices, dict)
    client = {n for n, p in choices.items() if "--server" in p.format_help()}
    assert client <= {c[0] for c in CLIENT_COMMANDS}


@pytest.mark.parametrize("command", [c for c in CLIENT_COMMANDS if c != ["models"]],
                         ids=" ".join)
def test_every_client_command_that_reports_has_json(command) -> None:
    """`models` only groups `models list` and `models activate`; every other client
    command reports something, and prints it as JSON with --json."""
    page = dict(subcommands(build_parser()))[" ".join(command)]
    assert "--json" in {flag for action in page._actions for flag in action.option_strings}


def run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_workflow_through_the_cli(envad_server, tmp_path, capsys) -> None:
    server = ["--server", envad_server.address]
    code, out = run(capsys, "health", *server)
    assert (code, out.strip()) == (0, "SERVING")
    code, out = run(capsys, "models", "list", "--json", *server)
    assert json.loads(out)["models"][0]["model_id"] == "tiny-test"
    code, out = run(capsys, "models", "activate", "tiny-test", *server)
    assert code == 0 and "tiny-test" in out

    dataset = make_folder_dataset(tmp_path / "ds", per_env=15)
    code, out = run(capsys, "backfill", str(dataset), "--no-progress", "--json",
                    "--checkpoint", str(tmp_path / "ck.jsonl"), *server)
    assert code == 0 and json.loads(out)["ok"] == 30

    code, out = run(capsys, "fit", "--detectors", "KNN,PCA", "--space", "center_l2",
                    "--min-camera-rows", "2", "--score-adaptation", "camera:8",
                    "--event-gap", "30", "--allow-few-rows", "--json", *server)
    fit = json.loads(out)
    assert code == 0 and fit["n_samples"] == 30 and fit["activated"]
    assert fit["space"] == "center_l2(min_camera_rows=2)"
    assert fit["score_adaptation"] == "camera(prior_rows=8)"
    # the folder dataset's images carry no timestamps nor events: every row is an event
    # of its own
    assert fit["fit_groups"] == ("scoring a fit row leaves its event out (frames of a camera "
                                 "with one event id, else <= 30 s apart): 30 rows in 30 "
                                 "events, largest 1")
    code, out = run(capsys, "info", *server)
    assert "cam0" in out and fit["bundle_id"] in out and "center_l2" in out
    assert "adaptation   camera(prior_rows=8)" in out and "calibration  interpolated" in out
    assert "fit rows     scoring a fit row leaves its event out" in out

    images = []
    for n in range(3):
        images.append(tmp_path / f"q{n}.png")
        images[-1].write_bytes(png_bytes(500 + n, 32))
    # stored: camX's statistics learn from its stored images (scoring alone changes none)
    code, out = run(capsys, "score", *map(str, images), "--env", "camX", "--store", *server)
    assert code == 0 and out.count("camX") == 3 and "KNN=" in out
    code, out = run(capsys, "score", *map(str, images), "--json", *server)
    records = json.loads(out)
    assert [r["image"] for r in records] == list(map(str, images))
    assert {r["provenance"]["score_adaptation"] for r in records} == {"camera(prior_rows=8)"}
    assert all(r["camera_weight"] == 0.0 for r in records)       # no --env: not adapted
    code, out = run(capsys, "reset-camera-stats", "camX", "nope", *server)
    assert code == 0 and "1 camera(s): camX" in out
    # every other camera's statistics, started from its stored rows by the Fit
    code, out = run(capsys, "reset-camera-stats", "--json", *server)
    assert code == 0 and json.loads(out) == {"reset": ["cam0", "cam1"]}
    assert all(0 <= r["ensemble"] <= 1 for r in records)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    code, out = run(capsys, "score", str(images[0]), str(bad), *server)
    assert code == 1 and "INVALID_ARGUMENT" in out

    out_file = tmp_path / "emb.parquet"
    code, out = run(capsys, "export-embeddings", "--out", str(out_file), "--env", "cam1", *server)
    table = pq.read_table(out_file)
    assert code == 0 and table.num_rows == 15 and set(table.column("env").to_pylist()) == {"cam1"}
    code, out = run(capsys, "export-embeddings", "--out", str(out_file), "--without-vectors",
                    *server)
    assert "vector" not in pq.read_table(out_file).column_names
    code, out = run(capsys, "export-embeddings", "--out", str(out_file), "--json",
                    "--no-progress", *server)
    # the 30 backfilled rows and the 3 scored with --store
    assert code == 0 and json.loads(out) == {"rows": 33, "out": str(out_file)}
    code, out = run(capsys, "health", "--json", *server)
    assert code == 0 and json.loads(out)["serving"] is True
    code, out = run(capsys, "models", "activate", "tiny-test", "--json", *server)
    assert code == 0 and json.loads(out)["model_id"] == "tiny-test"


def test_errors_become_messages(envad_server, capsys) -> None:
    code = main(["models", "activate", "missing", "--server", envad_server.address])
    assert code == 1
    assert "NOT_FOUND" in capsys.readouterr().err
    code = main(["health", "--server", "127.0.0.1:9", "--timeout", "1"])
    assert code == 1
