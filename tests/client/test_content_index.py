"""One image reaching the store from two sources under two ids is stored once
(client/content_index.py), against a real server."""

from __future__ import annotations

import json
import shutil

from client_archives import make_camtrap_dp
from envad.client import EnvadClient
from envad.client.cli import main
from envad.client.content_index import DUPLICATE_REASON, ContentIndex


def stored_rows(address: str) -> list[dict]:
    with EnvadClient(address) as client:
        return [row for batch in client.export(with_vectors=False) for row in batch.to_pylist()]


def backfill(capsys, address: str, *argv: str) -> dict:
    code = main(["backfill", *argv, "--no-progress", "--json", "--server", address])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0, summary
    return summary


def test_the_same_images_from_a_camtrap_package_and_a_folder_are_stored_once(
        envad_server, tmp_path, capsys) -> None:
    package = make_camtrap_dp(tmp_path / "pkg")              # ids deploymentID/mediaID
    tree = tmp_path / "copies" / "siteZ"                      # ids: sha256 of the bytes
    tree.mkdir(parents=True)
    for image in (package / "media").glob("*.png"):
        shutil.copy(image, tree / image.name)
    first = backfill(capsys, envad_server.address, str(package))
    assert first["inserted"] == 4
    second = backfill(capsys, envad_server.address, str(tmp_path / "copies"))
    assert second["inserted"] == 0 and second["skipped"] == {DUPLICATE_REASON: 4}
    rows = stored_rows(envad_server.address)
    assert len(rows) == 4 and {r["env"] for r in rows} == {"locA", "Ridge"}


def test_copies_inside_one_archive_and_keep_duplicates(envad_server, tmp_path, capsys) -> None:
    package = make_camtrap_dp(tmp_path / "pkg")
    (package / "media" / "m0.png").write_bytes((package / "media" / "m1.png").read_bytes())
    summary = backfill(capsys, envad_server.address, str(package))
    assert summary["inserted"] == 3 and summary["skipped"][DUPLICATE_REASON] == 1
    again = backfill(capsys, envad_server.address, str(package), "--keep-duplicates",
                     "--checkpoint", str(tmp_path / "again.jsonl"))
    assert again["inserted"] == 1                               # the copy, now stored too
    assert len(stored_rows(envad_server.address)) == 4


def test_rerunning_a_source_is_not_a_duplicate(envad_server, tmp_path, capsys) -> None:
    package = make_camtrap_dp(tmp_path / "pkg")
    backfill(capsys, envad_server.address, str(package), "--checkpoint",
             str(tmp_path / "a.jsonl"))
    rerun = backfill(capsys, envad_server.address, str(package), "--checkpoint",
                     str(tmp_path / "b.jsonl"))
    assert rerun["duplicates"] == 4 and DUPLICATE_REASON not in rerun["skipped"]


def test_claims() -> None:
    index = ContentIndex()
    sha = "ab" * 32
    assert index.claim(sha, "row-1") is None
    assert index.claim(sha, "row-1") is None                  # the same row again
    assert index.claim(sha, "row-2") == "row-1"
    other = "cd" * 32
    index.add(other, other)                                   # stored under its hash
    assert index.claim(other, other) is None
    assert index.claim(other, "dep1/m0") == other
    assert len(index) == 2


def test_a_scoring_backfill_scores_copies_without_storing_them(fitted_server, tmp_path,
                                                               capsys) -> None:
    from client_archives import write_csv
    from tiny_encoder import synthetic_images

    dataset = tmp_path / "ds"
    (dataset / "cam").mkdir(parents=True)
    for n, data in enumerate(synthetic_images("normal", 3, seed=1)):   # stored already
        (dataset / "cam" / f"{n}.png").write_bytes(data)
    write_csv(dataset / "metadata.csv", [
        {"path": f"cam/{n}.png", "env": "cam", "label": "x", "split": "new", "id": f"x{n}"}
        for n in range(3)])
    out = tmp_path / "scores.jsonl"
    summary = backfill(capsys, fitted_server.address, str(dataset), "--scores-out", str(out))
    assert summary["ok"] == 3 and summary["inserted"] == 0
    assert all(json.loads(line)["ensemble"] is not None for line in out.read_text().splitlines())
    assert len(stored_rows(fitted_server.address)) == 120
