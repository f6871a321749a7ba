"""Damaged store files met at start, on a real server (in this process: the start is
the code `envad serve` runs after parsing its flags).

Rows are ingested in two commits, the server stops, the newest version's data file or
manifest is truncated or deleted, and the server starts again: it serves the newest
readable version (Score, Search, Export), one ERROR names the damaged file, GetInfo's
hint names the version served, and the acknowledged rows of the lost version are not
dropped silently: writes are refused with the missing version named until the operator
deletes the acknowledged record (the documented step), after which writes resume.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import ingest_commit, writes_health
from tiny_encoder import synthetic_images

CASES = ("data-truncated", "data-deleted", "manifest-truncated", "manifest-deleted")
BASE_ROWS = 120     # the fitted_server fixture's rows
PER_COMMIT = 8
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _newest(paths) -> Path:
    return max(paths, key=lambda p: p.stat().st_mtime_ns)


def _damage(table_dir: Path, case: str) -> Path:
    """Damage the newest version's data file or manifest; returns the file."""
    if case.startswith("data"):
        target = _newest((table_dir / "data").glob("*.lance"))
    else:
        target = _newest((table_dir / "_versions").glob("*.manifest"))
    if case.endswith("truncated"):
        with open(target, "r+b") as f:
            f.truncate(target.stat().st_size // 2)
    else:
        os.remove(target)
    return target


def _refused(call) -> str:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value
    return refused.value.details() or ""


@pytest.mark.parametrize("case", CASES)
def test_a_damaged_newest_version_serves_the_previous_one_and_refuses_writes(
        fitted_server, caplog, case):
    stub = pb_grpc.AnomalyServiceStub(fitted_server.channel())
    assert ingest_commit(stub, "first", 11) == PER_COMMIT
    assert ingest_commit(stub, "second", 12) == PER_COMMIT       # the newest commit
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    acknowledged, total = info.table_version, info.total_rows
    assert total == BASE_ROWS + 2 * PER_COMMIT
    fitted_server.stop()
    [table_dir] = (fitted_server.data_dir / "lancedb").glob("*.lance")
    damaged = _damage(table_dir, case)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        fitted_server.start()               # starts: health SERVING (else this raises)
    assert writes_health(fitted_server) == NOT_SERVING      # reads served, writes not

    stub = pb_grpc.AnomalyServiceStub(fitted_server.channel())
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    served = acknowledged - 1
    assert info.total_rows == total - PER_COMMIT
    assert f"serving version {served}" in info.hint, info.hint
    assert f"acknowledged version {acknowledged}" in info.hint, info.hint
    if case != "manifest-deleted":
        assert damaged.name in info.hint, info.hint
    # the rows of the readable version are served: Score, Search, Export
    image = pb.Image(data=synthetic_images("normal", 1, seed=77)[0], env="cam-a")
    assert stub.Score(pb.ScoreRequest(images=[image]), timeout=30).results[0].ensemble >= 0
    assert stub.Search(pb.SearchRequest(image=image.data, k=3), timeout=30).neighbors
    exported = {row.id for chunk in stub.Export(
        pb.ExportRequest(format=pb.EXPORT_FORMAT_ROWS, without_vectors=True), timeout=30)
        for row in chunk.rows.rows}
    assert len(exported) == total - PER_COMMIT
    assert {f"first-{i}" for i in range(PER_COMMIT)} <= exported
    # one ERROR, naming the damaged (or missing) file and the version served
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert damaged.name in errors[0] and f"serving version {served}" in errors[0]
    # the acknowledged rows of the lost version are not dropped silently: writes refused
    for call in (lambda: ingest_commit(stub, "third", 13),
                 lambda: stub.Fit(pb.FitRequest(seed=0), timeout=60),
                 lambda: stub.SetLabel(pb.SetLabelRequest(ids=["first-0"], label="x"),
                                       timeout=30),
                 lambda: stub.Score(pb.ScoreRequest(images=[image], store=True),
                                    timeout=30)):
        details = _refused(call)
        assert f"acknowledged version {acknowledged}" in details, details
        assert f"{PER_COMMIT} acknowledged rows" in details and "backup" in details
    assert stub.GetInfo(pb.GetInfoRequest(), timeout=10).total_rows == total - PER_COMMIT

    # the operator accepts the loss: the documented step, then a restart
    fitted_server.stop()
    records = list((fitted_server.data_dir / "lancedb.acknowledged").glob("*.json"))
    assert len(records) == 1 and records[0].name in details
    records[0].unlink()
    fitted_server.start()
    assert writes_health(fitted_server) == SERVING
    stub = pb_grpc.AnomalyServiceStub(fitted_server.channel())
    assert ingest_commit(stub, "second", 12) == PER_COMMIT        # stored again
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    assert info.total_rows == total, info
    # a damaged data file is still the newest version: the readable one was restored
    # over it, which this process's hint says until the next start
    assert (info.hint == "ready" if case.startswith("manifest")
            else "restored as version" in info.hint), info.hint
    stub.SetLabel(pb.SetLabelRequest(ids=["first-0"], label="normal"), timeout=30)
    fitted_server.restart()                 # and the next start is clean
    info = pb_grpc.AnomalyServiceStub(fitted_server.channel()).GetInfo(
        pb.GetInfoRequest(), timeout=10)
    assert info.total_rows == total and info.hint == "ready", info


def test_acknowledged_commits_are_recorded_outside_the_table(envad_server):
    stub = pb_grpc.AnomalyServiceStub(envad_server.channel())
    assert ingest_commit(stub, "first", 11) == PER_COMMIT
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    [record] = (envad_server.data_dir / "lancedb.acknowledged").glob("*.json")
    import json

    assert json.loads(record.read_text()) == {"version": info.table_version,
                                              "rows": PER_COMMIT}
