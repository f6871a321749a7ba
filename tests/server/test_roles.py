"""The writer lease of a shared store (a folder read through pyarrow's local file
system, as the bucket is on object storage) and the refusal text of a reader."""

from __future__ import annotations

import json
import threading
import time

import pytest

from envad.errors import FailedPrecondition
from envad.server.config import ServerConfig
from envad.server.remote_dir import RemoteDir
from envad.server.roles import LEASE_NAME, WriterLease, reader_refusal


@pytest.fixture
def shared(tmp_path) -> RemoteDir:
    (tmp_path / "store").mkdir()
    return RemoteDir(f"file://{tmp_path / 'store'}", {})


def _lease(shared: RemoteDir, address: str = "") -> WriterLease:
    return WriterLease(shared, ServerConfig(data_dir="s3://bucket/store",
                                            writer_address=address))


def test_a_second_writer_is_refused_until_the_first_releases(shared) -> None:
    first = _lease(shared)
    first.acquire(port=5001)
    with pytest.raises(FailedPrecondition, match=r":5001 .*one writer per store"):
        _lease(shared).acquire(port=5002)
    first.release()
    assert shared.read_bytes(LEASE_NAME) is None
    _lease(shared).acquire(port=5002)


def test_a_restarted_writer_takes_its_own_lease_back(shared) -> None:
    _lease(shared, "writer.envad:50051").acquire(port=1)    # killed: never released
    again = _lease(shared, "writer.envad:50051")
    again.acquire(port=2)
    assert json.loads(shared.read_bytes(LEASE_NAME) or b"")["holder"] == again.holder


def test_a_stale_or_damaged_lease_is_taken_over(shared) -> None:
    old = _lease(shared)
    old.acquire(port=5001)
    lease = json.loads(shared.read_bytes(LEASE_NAME) or b"")
    lease["heartbeat"] = time.time() - old.stale_seconds - 1
    shared.write_bytes(LEASE_NAME, json.dumps(lease).encode())
    _lease(shared).acquire(port=5002)
    shared.write_bytes(LEASE_NAME, b"{not json")
    _lease(shared).acquire(port=5003)


def test_a_writer_whose_lease_was_taken_stops_writing(shared) -> None:
    first = _lease(shared)
    first.acquire(port=5001)
    first.renew()
    assert first.lost == ""
    shared.delete(LEASE_NAME)
    _lease(shared, "other:1").acquire(port=5002)    # e.g. after a long pause of the first
    first.renew()
    assert "other:1" in first.lost and "refuses writes" in first.lost
    first.release()                                  # not its lease: left as it is
    assert json.loads(shared.read_bytes(LEASE_NAME) or b"")["identity"] == "other:1"


def test_a_readers_refusal_names_the_writer() -> None:
    config = ServerConfig(data_dir="s3://bucket/store", role="reader",
                          writer_address="writer.envad:50051")
    text = reader_refusal(config)
    assert "reader of s3://bucket/store" in text and "--writer writer.envad:50051" in text


def test_a_lease_read_while_it_is_rewritten_is_read_again(shared) -> None:
    """A read cut short by a rewrite (the bytes of one version, the size of another) is
    not a damaged lease: the second writer reads again and is refused."""
    first = _lease(shared)
    first.acquire(port=5001)
    whole = shared.read_bytes(LEASE_NAME) or b""
    shared.write_bytes(LEASE_NAME, whole[: len(whole) // 2])
    rewrite = threading.Timer(0.02, shared.write_bytes, (LEASE_NAME, whole))
    rewrite.start()
    try:
        with pytest.raises(FailedPrecondition, match=r":5001 .*one writer per store"):
            _lease(shared).check(port=5002)
    finally:
        rewrite.join()
