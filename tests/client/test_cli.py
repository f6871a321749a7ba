"""`envad` as a user meets it in a shell: every failure is one line on stderr with a
non-zero exit code, never a traceback; a closed output pipe ends the command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tiny_encoder import synthetic_images

ENVAD = [sys.executable, "-m", "envad.client.cli"]


def envad(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*ENVAD, *argv], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_score_of_a_missing_file(tmp_path) -> None:
    line = assert_one_line_error(envad("score", str(tmp_path / "nonexistent.jpg")),
                                 "no such file", "nonexistent.jpg")
    assert line.startswith("envad: error: ")


def test_score_of_a_folder_points_to_the_folder_commands(tmp_path) -> None:
    assert_one_line_error(envad("score", str(tmp_path)), "is a folder", "envad scan")


def test_score_of_a_glob_that_matched_nothing(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    # the shell passes an unmatched pattern through as it is
    assert_one_line_error(envad("score", "empty/*.JPG", cwd=tmp_path),
                          "empty/*.JPG", "no file matching")


def test_connection_refused_suggests_envad_serve(unused_port) -> None:
    assert_one_line_error(envad("info", "--server", f"127.0.0.1:{unused_port}"),
                          "UNAVAILABLE", "envad serve")


@pytest.mark.parametrize("url", ["http://127.0.0.1:50051", "grpc://scoring.internal"])
def test_a_url_as_server_is_refused_with_the_fix(url) -> None:
    result = envad("info", "--server", url)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "not a URL" in result.stderr and "--server " in result.stderr


def test_a_closed_pipe_ends_the_command_quietly(envad_server) -> None:
    # `| true` closes the pipe before envad writes (Python starts slower than `true`)
    command = " ".join([*ENVAD, "info", "--json", "--server", envad_server.address])
    result = subprocess.run(["bash", "-c", f"{command} | true; echo rc=${{PIPESTATUS[0]}}"],
                            capture_output=True, text=True, timeout=120)
    assert "BrokenPipe" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == ""
    assert result.stdout.strip() in ("rc=0", "rc=141")


def test_an_output_that_cannot_be_written(envad_server, tmp_path) -> None:
    (tmp_path / "file").write_text("")
    result = envad("export-embeddings", "--out", str(tmp_path / "file" / "emb.parquet"),
                   "--no-progress", "--server", envad_server.address)
    assert_one_line_error(result, "file")


def test_a_backfill_that_would_do_nothing_says_so(envad_server, tmp_path) -> None:
    (tmp_path / "empty" / "camA").mkdir(parents=True)
    assert_one_line_error(envad("backfill", str(tmp_path / "empty"), "--server",
                                envad_server.address), "holds no images")
    (tmp_path / "cams" / "camA").mkdir(parents=True)
    (tmp_path / "cams" / "camA" / "IMG_0001.JPG").write_bytes(synthetic_images("normal", 1)[0])
    assert_one_line_error(envad("backfill", str(tmp_path / "cams"), "--only-split", "train",
                                "--no-progress", "--server", envad_server.address),
                          "no item", "splits ['archive']")


def test_writes_to_listed_replicas_need_a_writer(envad_server, tmp_path) -> None:
    """With several --server addresses and no --writer, a backfill that stores stops
    with one line naming --writer, before it starts a checkpoint."""
    (tmp_path / "cams" / "camA").mkdir(parents=True)
    (tmp_path / "cams" / "camA" / "IMG_0001.JPG").write_bytes(synthetic_images("normal", 1)[0])
    replicas = f"{envad_server.address},{envad_server.address}"
    assert_one_line_error(envad("backfill", str(tmp_path / "cams"), "--no-progress",
                                "--server", replicas, "--checkpoint", str(tmp_path / "ck")),
                          "FAILED_PRECONDITION", "envad backfill writes", "--writer HOST:PORT")
    assert not (tmp_path / "ck").exists()
    written = envad("backfill", str(tmp_path / "cams"), "--no-progress", "--server",
                    replicas, "--writer", envad_server.address, "--checkpoint",
                    str(tmp_path / "ck"))
    assert written.returncode == 0, written.stderr
    assert "ingested     1" in written.stdout
