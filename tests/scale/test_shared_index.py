"""The saved index on object storage: the writer uploads its saves (data files, then
the manifest; earlier saves' files deleted), and a reader on an empty cache loads the
download of a trained (IVF) index instead of reading every vector from the store and
training it again; a flat one it builds from the store."""

from __future__ import annotations

import logging
import time

from s3_emulator import in_process, local_models

from envad.server.remote_dir import RemoteDir
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import ingest_commit
from tiny_encoder import synthetic_images

#: rows from which the test servers' index is IVF (trained): the kind a reader downloads
IVF_FROM = "16"


def _index_files(s3_uri: str, s3_options: dict[str, str]) -> list[str]:
    return RemoteDir(s3_uri, s3_options).child("index").files()


def test_a_reader_on_an_empty_cache_loads_the_writers_saved_index(
        s3_options, s3_uri, tmp_path, tiny_model_path, caplog) -> None:
    models = local_models(tmp_path, tiny_model_path)
    writer = in_process(s3_uri, models, tmp_path / "cache-w", s3_options, role="writer",
                        ivf_threshold=IVF_FROM).start()
    stub = pb_grpc.AnomalyServiceStub(writer.channel())
    assert ingest_commit(stub, "first", seed=1, count=24) == 24
    writer.stop()                       # saves its index at shutdown, and uploads it
    saved = _index_files(s3_uri, s3_options)
    assert len(saved) == 3 and sum(n.endswith("/manifest.json") for n in saved) == 1

    writer.start()
    assert ingest_commit(pb_grpc.AnomalyServiceStub(writer.channel()), "more", seed=2,
                         count=8) == 8
    writer.stop()                       # a second save replaces the first on the bucket
    resaved = _index_files(s3_uri, s3_options)
    assert len(resaved) == 3 and set(resaved) != set(saved)

    caplog.set_level(logging.INFO, logger="envad")
    reader = in_process(s3_uri, models, tmp_path / "cache-r", s3_options,
                        role="reader", ivf_threshold=IVF_FROM).start()
    try:
        text = caplog.text
        assert "saved index of 32 rows downloaded" in text
        assert "loaded: 32 rows" in text and "built from the store" not in text
        found = pb_grpc.AnomalyServiceStub(reader.channel()).Search(pb.SearchRequest(
            image=synthetic_images("normal", 8, seed=2)[5], k=1), timeout=30).neighbors
        assert found[0].id == "more-5"
    finally:
        reader.stop()


def test_a_flat_saved_index_is_built_from_the_store_not_downloaded(
        s3_options, s3_uri, tmp_path, tiny_model_path, caplog) -> None:
    models = local_models(tmp_path, tiny_model_path)
    writer = in_process(s3_uri, models, tmp_path / "cache-w", s3_options, role="writer").start()
    assert ingest_commit(pb_grpc.AnomalyServiceStub(writer.channel()), "flat", seed=1) == 8
    writer.stop()
    assert len(_index_files(s3_uri, s3_options)) == 3
    caplog.set_level(logging.INFO, logger="envad")
    reader = in_process(s3_uri, models, tmp_path / "cache-r", s3_options,
                        role="reader").start()
    reader.stop()
    assert "downloaded" not in caplog.text and "built from the store: 8 rows" in caplog.text


def _nearest(server, image: bytes) -> tuple[str, float]:
    found = pb_grpc.AnomalyServiceStub(server.channel()).Search(
        pb.SearchRequest(image=image, k=1), timeout=30).neighbors
    return (found[0].id, found[0].distance) if found else ("", -1.0)


def test_a_reader_reranks_against_the_store_on_object_storage(
        s3_options, s3_uri, tmp_path, tiny_model_path, caplog) -> None:
    """The compressed kind on object storage: a reader loads the writer's 4-bit index,
    follows rows written after it by their row ids, and answers with the stored
    vectors' exact distances (an image's own row at 0), as the writer does."""
    models = local_models(tmp_path, tiny_model_path)
    settings = {"ivf_threshold": IVF_FROM, "compressed_threshold": IVF_FROM}
    writer = in_process(s3_uri, models, tmp_path / "cache-w", s3_options, role="writer",
                        **settings).start()
    assert ingest_commit(pb_grpc.AnomalyServiceStub(writer.channel()), "first", seed=1,
                         count=24) == 24
    writer.stop()
    caplog.set_level(logging.INFO, logger="envad")
    writer.start()
    reader = in_process(s3_uri, models, tmp_path / "cache-r", s3_options, role="reader",
                        writer_address=writer.address, **settings).start()
    try:
        assert "saved index of 24 rows downloaded" in caplog.text
        assert "loaded: 24 rows (ivf-sq4)" in caplog.text
        first = synthetic_images("normal", 24, seed=1)
        assert _nearest(reader, first[7]) == ("first-7", 0.0) == _nearest(writer, first[7])
        assert ingest_commit(pb_grpc.AnomalyServiceStub(writer.channel()), "more", seed=2) == 8
        more = synthetic_images("normal", 8, seed=2)[5]
        assert _nearest(writer, more) == ("more-5", 0.0)
        deadline = time.monotonic() + 30
        while _nearest(reader, more) != ("more-5", 0.0) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _nearest(reader, more) == ("more-5", 0.0)
    finally:
        reader.stop()
        writer.stop()
