"""MultiEnvDataset.images: the server's pixels, in order, decoded in threads only when the
files are large enough to gain from it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PIL import Image

from envad.server.images import ImageDecodeError, decode_image
from envad.training import multienv
from envad.training.multienv import PARALLEL_DECODE_BYTES, MultiEnvDataset, Record


def folder(tmp_path, count: int, side: int, fmt: str) -> MultiEnvDataset:
    rng = np.random.default_rng(side)
    records = []
    for i in range(count):
        pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)   # noise: large files
        path = f"img-{i}.{fmt.lower()}"
        Image.fromarray(pixels).save(tmp_path / path, format=fmt)
        records.append(Record(id=str(i), path=path, env=f"cam-{i % 2}", label="0",
                              split="train", bucket=0, is_anomaly=False))
    return MultiEnvDataset("noise", tmp_path, records)


def decoding_threads(monkeypatch) -> set[int]:
    seen: set[int] = set()
    barrier = threading.Barrier(2, timeout=0.5)

    def recording(data, size):
        seen.add(threading.get_ident())
        try:
            barrier.wait()           # two threads meet here when both decode at once
        except threading.BrokenBarrierError:
            pass
        return decode_image(data, size)

    monkeypatch.setattr(multienv, "decode_image", recording)
    monkeypatch.setattr(multienv, "decode_threads", lambda: 2)
    return seen


def test_large_files_are_decoded_on_two_threads_into_the_same_pixels(tmp_path, monkeypatch):
    dataset = folder(tmp_path, 70, 200, "JPEG")
    assert (tmp_path / "img-0.jpeg").stat().st_size >= PARALLEL_DECODE_BYTES
    expected = np.stack([decode_image(dataset.read_bytes(i), 24) for i in range(70)])
    seen = decoding_threads(monkeypatch)
    order = np.array([5, 69, 0, 33] + list(range(66)))[:70]
    got = dataset.images(order, 24)
    assert len(seen) == 2
    np.testing.assert_array_equal(got, expected[order])


def test_small_files_are_decoded_in_the_calling_thread(tmp_path, monkeypatch):
    dataset = folder(tmp_path, 20, 8, "PNG")
    assert (tmp_path / "img-0.png").stat().st_size < PARALLEL_DECODE_BYTES
    seen = decoding_threads(monkeypatch)
    dataset.images(np.arange(20), 8)
    assert seen == {threading.get_ident()}


def test_a_broken_file_among_large_ones_is_an_error(tmp_path):
    dataset = folder(tmp_path, 10, 200, "JPEG")
    (tmp_path / "img-7.jpeg").write_bytes(b"\xff\xd8 cut short" * 2000)
    with pytest.raises(ImageDecodeError):
        dataset.images(np.arange(10), 24)
