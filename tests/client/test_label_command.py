"""`envad label` against a real server: ids on the command line, unique id prefixes,
stored files, a CSV of ids or the review page's review.csv; the labels land in the store,
unknown ids, ambiguous prefixes and bad files give one-line errors and exit 1."""

from __future__ import annotations

import json
import os

import pytest

from envad.client import EnvadClient
from envad.client.cli import main
from envad.client.results import ImageInput, IngestInput
from tiny_encoder import synthetic_images


@pytest.fixture
def stored(envad_server):
    with EnvadClient(envad_server.address) as client:
        client.ingest([IngestInput(ImageInput(data=d, id=f"img{i}", env="cam"), split="archive")
                       for i, d in enumerate(synthetic_images("normal", 4, seed=3))])
    return envad_server


def stored_labels(address: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    with EnvadClient(address) as client:
        for batch in client.export(with_vectors=False):
            labels.update(zip(batch.column("id").to_pylist(), batch.column("label").to_pylist(),
                              strict=True))
    return labels


def test_label_ids_and_csv(stored, tmp_path, capsys) -> None:
    server = ["--server", stored.address]
    assert main(["label", "--normal", "img0", "img1", *server]) == 0
    assert "labelled 2 row(s) 'normal'" in capsys.readouterr().out
    review = tmp_path / "review.csv"
    review.write_text("id,env,ensemble\nimg2,cam,0.99\nimg3,cam,0.97\n")
    assert main(["label", "--anomaly", "--ids-from", str(review), "--json", *server]) == 0
    assert json.loads(capsys.readouterr().out)["updated"] == ["img2", "img3"]
    assert stored_labels(stored.address) == {"img0": "normal", "img1": "normal",
                                             "img2": "anomaly", "img3": "anomaly"}


def test_unknown_ids_and_bad_files_exit_1_with_one_line(stored, tmp_path, capsys) -> None:
    server = ["--server", stored.address]
    assert main(["label", "--normal", "img0", "ghost", *server]) == 1
    captured = capsys.readouterr()
    assert "labelled 1 row(s)" in captured.out
    assert captured.err.strip() == "1 id(s) not stored: ghost"
    no_column = tmp_path / "ids.csv"
    no_column.write_text("key\nimg0\n")
    assert main(["label", "--normal", "--ids-from", str(no_column), *server]) == 1
    assert "has no 'id' column" in capsys.readouterr().err
    assert main(["label", "--normal", "--ids-from", str(tmp_path / "none.csv"), *server]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["label", "--normal", *server]) == 1
    assert "no ids given" in capsys.readouterr().err
    assert stored_labels(stored.address)["img1"] == ""


def test_prefixes_files_and_review_files(envad_server, tmp_path, capsys) -> None:
    server = ["--server", envad_server.address]
    names = ["rowaaa1", "rowaaa2", "rowbbb1", "rowccc1"]
    files = [tmp_path / f"IMG_{i}.png" for i in range(len(names))]
    for file, data in zip(files, synthetic_images("normal", len(names), seed=5), strict=True):
        file.write_bytes(data)
    with EnvadClient(envad_server.address) as client:
        client.ingest([IngestInput(ImageInput(data=f.read_bytes(), id=n, env="cam",
                                              uri=str(f)), split="archive")
                       for n, f in zip(names, files, strict=True)])
    # a unique prefix, a file:// URL and a path relative to here name one row each
    relative = os.path.relpath(files[3])
    assert main(["label", "--normal", "rowbbb", files[0].as_uri(), relative, *server]) == 0
    assert "labelled 3 row(s) 'normal'" in capsys.readouterr().out
    assert stored_labels(envad_server.address) == {
        "rowaaa1": "normal", "rowaaa2": "", "rowbbb1": "normal", "rowccc1": "normal"}
    assert main(["label", "--anomaly", "rowaaa", *server]) == 1
    assert "'rowaaa' names 2 stored rows" in capsys.readouterr().err
    review = tmp_path / "review.csv"
    review.write_text("id,verdict,env,file\nrowaaa2,new_content,cam,IMG_1.png\n"
                      "rowbbb1,false_alarm,cam,IMG_2.png\n")
    assert main(["label", "--from", str(review), *server]) == 0
    assert stored_labels(envad_server.address)["rowaaa2"] == "anomaly"
    review.write_text("id,verdict\nrowaaa2,maybe\n")
    assert main(["label", "--from", str(review), *server]) == 1
    assert "verdict 'maybe'" in capsys.readouterr().err
    review.write_text("id,env\nrowaaa2,cam\n")
    assert main(["label", "--from", str(review), *server]) == 1
    assert "not a review file" in capsys.readouterr().err
    review.write_text("id,verdict\n")
    assert main(["label", "--from", str(review), *server]) == 1
    assert "marks no image" in capsys.readouterr().err
