"""The acknowledged-version record of a store on object storage (moto's S3 server on
loopback): rows are ingested in two commits, the server stops, the newest manifest
object of the table is deleted from the bucket, and a server started on an empty cache
serves the previous version read-only, naming the acknowledged version that is missing.
"""

from __future__ import annotations

import json
import re

import boto3
import grpc
import pytest
from grpc_health.v1 import health_pb2
from s3_emulator import BUCKET, in_process, local_models

from envad.server.remote_dir import RemoteDir
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import ingest_commit, writes_health

PER_COMMIT = 8
_U64_MAX = (1 << 64) - 1
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVING = health_pb2.HealthCheckResponse.SERVING


def _delete_newest_manifest(options: dict[str, str], uri: str) -> str:
    """Delete the newest manifest object of the (one) table under `uri`; its key."""
    s3 = boto3.client("s3", endpoint_url=options["aws_endpoint"],
                      region_name=options["aws_region"],
                      aws_access_key_id=options["aws_access_key_id"],
                      aws_secret_access_key=options["aws_secret_access_key"])
    prefix = uri[len(f"s3://{BUCKET}/"):] + "/lancedb/"
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]
    manifests = {}
    for key in (o["Key"] for o in listed):
        match = re.search(r"\.lance/_versions/(\d+)\.manifest$", key)
        if match:      # lance names a manifest by its version, or by u64::MAX - version
            number = int(match.group(1))
            manifests[_U64_MAX - number if number > (1 << 63) else number] = key
    newest = manifests[max(manifests)]
    s3.delete_object(Bucket=BUCKET, Key=newest)
    return newest


def test_a_lost_manifest_on_the_bucket_is_served_read_only(
        s3_options, s3_uri, tmp_path, tiny_model_path):
    models = local_models(tmp_path, tiny_model_path)
    first = in_process(s3_uri, models, tmp_path / "cache-1", s3_options).start()
    try:
        stub = pb_grpc.AnomalyServiceStub(first.channel())
        assert ingest_commit(stub, "first", 11) == PER_COMMIT
        assert ingest_commit(stub, "second", 12) == PER_COMMIT        # the newest commit
        info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
        assert writes_health(first) == SERVING
    finally:
        first.stop()
    acknowledged, total = info.table_version, info.total_rows
    [record] = RemoteDir(s3_uri, s3_options).files("lancedb.acknowledged")
    written = json.loads(RemoteDir(s3_uri, s3_options).read_bytes(
        f"lancedb.acknowledged/{record}") or b"")
    assert written == {"version": acknowledged, "rows": total}
    _delete_newest_manifest(s3_options, s3_uri)

    second = in_process(s3_uri, models, tmp_path / "cache-2", s3_options).start()
    try:
        assert writes_health(second) == NOT_SERVING             # reads served, writes not
        stub = pb_grpc.AnomalyServiceStub(second.channel())
        info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
        assert info.total_rows == total - PER_COMMIT
        assert f"serving version {acknowledged - 1}" in info.hint, info.hint
        assert f"acknowledged version {acknowledged}" in info.hint, info.hint
        exported = {row.id for chunk in stub.Export(
            pb.ExportRequest(format=pb.EXPORT_FORMAT_ROWS, without_vectors=True),
            timeout=30) for row in chunk.rows.rows}
        assert exported == {f"first-{i}" for i in range(PER_COMMIT)}
        with pytest.raises(grpc.RpcError) as refused:
            ingest_commit(stub, "third", 13)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = refused.value.details() or ""
        assert f"acknowledged version {acknowledged}" in details, details
        assert f"{PER_COMMIT} acknowledged rows" in details
        assert f"{s3_uri}/lancedb.acknowledged/{record}" in details, details
    finally:
        second.stop()
