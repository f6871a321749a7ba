"""moto's S3 server on 127.0.0.1 for the object-storage tests, with one bucket."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pyarrow.fs as pafs
import pytest
from moto import server as moto_server
from s3_emulator import BUCKET, SECRET


@pytest.fixture(scope="session")
def s3_options() -> Iterator[dict[str, str]]:
    """Storage options of a bucket on an S3 server on 127.0.0.1 (moto)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)     # one line per request
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"aws_endpoint": f"http://{host}:{port}", "allow_http": "true",
               "aws_region": "us-east-1", "aws_access_key_id": "envad-test",
               "aws_secret_access_key": SECRET}
    pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", region="us-east-1",
                      access_key="envad-test", secret_key=SECRET,
                      allow_bucket_creation=True).create_dir(BUCKET)
    yield options
    server.stop()


@pytest.fixture
def s3_uri() -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
