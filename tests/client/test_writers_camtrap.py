"""Camtrap DP observations out: a backfill of a Camtrap DP package through a real server
writes observations that Frictionless validates against the Camtrap DP 1.0 table schema
(tests/data/camtrap_dp_1.0, from the standard's 1.0 tag), one machine observation per
scored image that joins back to the package's media and deployments."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from client_archives import make_camtrap_dp, make_image_tree
from envad.client import EnvadClient
from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.sources import open_source
from envad.client.writers import write_scores
from envad.client.writers_camtrap import OBSERVATION_FIELDS
from envad.errors import InvalidInput

SCHEMA = Path(__file__).resolve().parents[1] / "data/camtrap_dp_1.0/observations-table-schema.json"


def observations_schema() -> dict:
    """The 1.0 observations schema; its foreign keys name the package's other tables,
    so they are checked below by joining, and Frictionless checks the rest."""
    descriptor = json.loads(SCHEMA.read_text())
    descriptor.pop("foreignKeys")
    return descriptor


def frictionless_errors(path: Path) -> list:
    from frictionless import Resource, Schema

    resource = Resource(path=path.name, basepath=str(path.parent),
                        schema=Schema.from_descriptor(observations_schema()))
    report = resource.validate()
    return report.flatten(["rowNumber", "fieldName", "type", "note"])


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_writer_knows_every_field_of_the_schema() -> None:
    assert OBSERVATION_FIELDS == tuple(f["name"] for f in observations_schema()["fields"])


def test_observations_of_a_backfill_are_valid_camtrap_dp(fitted_server, tmp_path) -> None:
    package = make_camtrap_dp(tmp_path / "pkg")
    media_csv = package / "media.csv"
    lines = media_csv.read_text().splitlines()
    lines[3] = lines[3].replace(",true,", ",false,")  # dep2/m2 is not public
    media_csv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "observations.csv"
    with EnvadClient(fitted_server.address) as client:
        summary = run_backfill(client, open_source(package), tmp_path / "ck.jsonl",
                               BackfillOptions(scores=True, store=False), scores_out=out,
                               scores_format="camtrap-dp", progress=False)
        model_id = client.info().active_model.model_id
    assert summary.ok == 4
    assert frictionless_errors(out) == []
    rows = {r["mediaID"]: r for r in read_rows(out)}
    assert set(rows) == {"m0", "m1", "m2", "m3"}  # the skipped video has no observation
    media = {r["mediaID"]: r for r in read_rows(media_csv)}
    deployments = {r["deploymentID"] for r in read_rows(package / "deployments.csv")}
    for media_id, row in rows.items():
        assert row["deploymentID"] == media[media_id]["deploymentID"] in deployments
        assert row["classificationMethod"] == "machine"
        assert row["classifiedBy"] == f"envad {model_id}"
        assert 0.0 <= float(row["classificationProbability"]) <= 1.0
        assert row["observationLevel"] == "media" and row["observationType"] == "unclassified"
    assert rows["m2"]["eventStart"] == "2024-01-03T07:00:00Z"  # +01:00 in media.csv
    assert "filePublic:false" in rows["m2"]["observationTags"].split("|")
    assert "filePublic:false" not in rows["m0"]["observationTags"]

    skipping = open_source(package, skip_non_public=True)
    with EnvadClient(fitted_server.address) as client:
        summary = run_backfill(client, skipping, tmp_path / "ck2.jsonl",
                               BackfillOptions(scores=True, store=False), scores_out=out,
                               scores_format="camtrap-dp", progress=False)
    assert summary.skipped["not public (filePublic=false)"] == 1
    assert {r["mediaID"] for r in read_rows(out)} == {"m0", "m1", "m3"}


def test_a_schema_violation_is_caught(tmp_path) -> None:
    """The check above can fail: a probability above 1 is reported by Frictionless."""
    out = tmp_path / "observations.csv"
    record = {"key": "dep1/m0", "status": "ok", "ensemble": 1.5, "is_anomaly": True,
              "threshold": 0.9, "timestamp": "2024-01-02T10:00:00+00:00", "model_id": "m",
              "source": {"deploymentID": "dep1", "mediaID": "m0"}}
    write_scores(out, lambda: iter([record]), "camtrap-dp")
    assert [e[1] for e in frictionless_errors(out)] == ["classificationProbability"]


def test_other_sources_are_refused_before_the_run(fitted_server, tmp_path) -> None:
    tree = make_image_tree(tmp_path / "tree")
    with EnvadClient(fitted_server.address) as client, \
            pytest.raises(InvalidInput, match="needs a Camtrap DP source"):
        run_backfill(client, open_source(tree), tmp_path / "ck.jsonl",
                     BackfillOptions(scores=True, store=False),
                     scores_out=tmp_path / "observations.csv", scores_format="camtrap-dp",
                     progress=False)
    assert not (tmp_path / "observations.csv").exists()


def test_camtrap_flags(fitted_server, tmp_path) -> None:
    from envad.client.cli import main

    package = make_camtrap_dp(tmp_path / "pkg")
    media_csv = package / "media.csv"
    media_csv.write_text(media_csv.read_text().replace(",true,", ",false,", 1))  # dep1/m0
    out = tmp_path / "envad-observations.csv"
    assert main(["backfill", str(package), "--server", fitted_server.address, "--no-store",
                 "--skip-non-public", "--scores-out", str(out), "--scores-format",
                 "camtrap-dp", "--no-progress", "--checkpoint", str(tmp_path / "ck.jsonl")]) == 0
    assert {r["mediaID"] for r in read_rows(out)} == {"m1", "m2", "m3"}
