"""What `envad fit` fits on when not told (client/fit_choice.py), and its refusal of too
few rows, against a real server."""

from __future__ import annotations

import json

import pytest

from camera_folder import make_camera_folder
from envad.client import EnvadClient
from envad.client.cli import main
from envad.client.fit_choice import MIN_FIT_ROWS, choose_fit_rows, count_rows
from envad.client.results import ImageInput, IngestInput, RowFilter
from envad.errors import FailedPrecondition
from tiny_encoder import synthetic_images


def ingest(address: str, n: int, split: str, seed: int = 1) -> None:
    with EnvadClient(address) as client:
        client.ingest([IngestInput(ImageInput(data, env=f"cam{i % 2}"), split=split)
                       for i, data in enumerate(synthetic_images("normal", n, seed=seed))])


def test_fit_after_a_plain_backfill_fits_on_what_was_stored(envad_server, tmp_path,
                                                             capsys) -> None:
    folder = make_camera_folder(tmp_path / "mycams")       # stored under split "archive"
    server = ["--server", envad_server.address]
    assert main(["backfill", str(folder), "--no-progress", *server]) == 0
    capsys.readouterr()
    assert main(["fit", "--json", *server]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n_samples"] == 124
    assert "fit: on every stored row (no row is in split train" in captured.err
    assert "elapsed" in captured.err                           # the progress line


def test_fit_prefers_split_train_when_it_is_stored(envad_server) -> None:
    ingest(envad_server.address, 110, "train")
    ingest(envad_server.address, 12, "test", seed=7)
    with EnvadClient(envad_server.address) as client:
        choice = choose_fit_rows(client)
        assert choice.row_filter == RowFilter(splits=("train",))
        assert "split train" in choice.description
        assert count_rows(client, choice.row_filter, 1000) == 110
        assert count_rows(client, RowFilter(), 5) == 5
        assert choose_fit_rows(client, splits=("test",)).row_filter == RowFilter(
            splits=("test",))


def test_too_few_rows_are_refused_naming_the_minimum(envad_server, capsys) -> None:
    ingest(envad_server.address, 36, "archive")
    server = ["--server", envad_server.address, "--no-progress"]
    assert main(["fit", *server]) == 1
    err = capsys.readouterr().err
    assert "only 36 stored rows" in err and f"at least {MIN_FIT_ROWS}" in err
    assert "--allow-few-rows" in err
    assert main(["fit", "--allow-few-rows", "--json", *server]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n_samples"] == 36
    assert "envad: warning: only 36 stored rows" in captured.err


def test_an_empty_store_says_to_backfill_first(envad_server) -> None:
    with EnvadClient(envad_server.address) as client, pytest.raises(
            FailedPrecondition, match="envad backfill"):
        choose_fit_rows(client)


def test_info_names_the_step_that_works(envad_server, tmp_path, capsys) -> None:
    server = ["--server", envad_server.address]
    assert main(["info", *server]) == 0
    assert "next step    store images of your cameras: `envad backfill" in capsys.readouterr().out
    ingest(envad_server.address, 120, "archive")
    assert main(["info", "--json", *server]) == 0
    assert json.loads(capsys.readouterr().out)["next_step"].startswith(
        "fit the detectors: `envad fit`")
    assert main(["fit", "--no-progress", *server]) == 0      # the advice works as given
    assert main(["info", *server]) == 0
    assert "next step    ready" in capsys.readouterr().out
