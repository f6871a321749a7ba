"""The requests a store on object storage makes (moto's S3 server on loopback, each
request it answers counted): a read asks for the rows only, never for the table's newest
version; newer versions are picked up by `refresh` and before the writer dedupes ids;
an object is written in one request."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from benchmarks.store_requests import RequestCounter
from envad.server.remote_dir import RemoteDir
from envad.server.store import EmbeddingStore, Row

DIM = 8


@pytest.fixture
def requests() -> Iterator[RequestCounter]:
    """Every request the session's S3 server answers from now on, counted."""
    with RequestCounter().counting() as counter:
        yield counter


def rows(start: int, count: int) -> list[Row]:
    return [Row(id=f"r{i}", vector=np.full(DIM, i, np.float32), env="cam-a", split="train")
            for i in range(start, start + count)]


def test_a_read_asks_for_the_rows_only(s3_options, s3_uri, requests):
    writer = EmbeddingStore(f"{s3_uri}/lancedb", "m", DIM, s3_options)
    writer.append(writer.to_arrow(rows(0, 20)))
    reader = EmbeddingStore(f"{s3_uri}/lancedb", "m", DIM, s3_options)
    row_ids = reader.read(with_vectors=False, columns=["id"], with_row_ids=True)["_rowid"]
    requests.clear()
    vectors = reader.vectors_by_row_id(np.asarray(row_ids)[[3, 7]])
    assert reader.count() == 20 and reader.version == writer.version
    np.testing.assert_array_equal(vectors[:, 0], [3, 7])
    assert requests.listings == 0, requests.seen      # no look for a newer version


def test_a_newer_version_is_read_after_a_refresh(s3_options, s3_uri, requests):
    writer = EmbeddingStore(f"{s3_uri}/lancedb", "m", DIM, s3_options)
    writer.append(writer.to_arrow(rows(0, 10)))
    reader = EmbeddingStore(f"{s3_uri}/lancedb", "m", DIM, s3_options)
    held = reader.version
    writer.append(writer.to_arrow(rows(10, 5)))
    assert reader.count() == 10 and reader.version == held     # the version it holds
    requests.clear()
    assert reader.refresh() is True
    assert requests.listings >= 1                             # refresh looks
    assert reader.count() == 15 and reader.version == writer.version


def test_the_ids_another_process_committed_are_synced_without_a_refresh(
        s3_options, s3_uri):
    """What the writer dedupes a commit against: the ids of every version up to the
    newest, whoever committed it (a Ray backfill's driver, here a second handle)."""
    writer = EmbeddingStore(f"{s3_uri}/lancedb", "m", DIM, s3_options)
    writer.append(writer.to_arrow(rows(0, 10)))
    held = writer.stored_ids()
    other = EmbeddingStore(f"{s3_uri}/lancedb", "m", DIM, s3_options)
    other.append(other.to_arrow(rows(10, 4)))
    synced = writer.synced_ids(held)
    assert synced.version == other.version
    found = synced.ids.positions([f"r{i}" for i in range(14)])
    assert (found >= 0).all()


def test_an_object_is_written_in_one_request(s3_options, s3_uri, requests):
    remote = RemoteDir(s3_uri, s3_options)
    requests.clear()
    remote.write_bytes("state.json", b"{}" * 1000)
    assert dict(requests.seen) == {("PUT", False): 1}
    assert remote.read_bytes("state.json") == b"{}" * 1000


def test_a_write_to_a_missing_bucket_fails_at_once(s3_options):
    """With the write sent when the stream closes, its failure is still the writer's:
    one FailedPrecondition naming the object."""
    from envad.errors import FailedPrecondition

    remote = RemoteDir("s3://envad-no-such-bucket/p", s3_options)
    with pytest.raises(FailedPrecondition, match="cannot write state.json"):
        remote.write_bytes("state.json", b"{}")
