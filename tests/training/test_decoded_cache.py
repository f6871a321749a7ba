"""The decoded-image cache: a repeated call decodes nothing, a changed file is decoded
again, trouble with the cache costs a warning and never a wrong image."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
from PIL import Image

from envad.server.images import decode_image
from envad.training import decoded_cache, multienv
from envad.training.decoded_cache import MIN_CACHED_IMAGES, DecodedCache
from envad.training.multienv import MultiEnvDataset, Record

COUNT = MIN_CACHED_IMAGES + 8


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ENVAD_DECODED_CACHE_MB", raising=False)
    monkeypatch.setattr(DecodedCache, "_warned", set())
    return tmp_path / "cache" / "decoded"


@pytest.fixture
def decodes(monkeypatch) -> list[int]:
    """How many images the dataset decoded (the real decoder, counted)."""
    calls: list[int] = []

    def counted(data, size):
        calls.append(size)
        return decode_image(data, size)

    monkeypatch.setattr(multienv, "decode_image", counted)
    return calls


def png_folder(root, count: int = COUNT, side: int = 12) -> MultiEnvDataset:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(side)
    records = []
    for i in range(count):
        path = f"img-{i}.png"
        Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(root / path)
        records.append(Record(id=str(i), path=path, env=f"cam-{i % 2}", label="0",
                              split="train", bucket=0, is_anomaly=False))
    return MultiEnvDataset("noise", root, records)


def expected(dataset: MultiEnvDataset, indices, size: int) -> np.ndarray:
    return np.stack([decode_image(dataset.read_bytes(int(i)), size) for i in indices])


def test_a_second_call_takes_the_decoded_images_from_the_cache(tmp_path, cache_dir, decodes):
    dataset = png_folder(tmp_path / "data")
    order = np.random.default_rng(0).permutation(COUNT)
    first = dataset.images(order, 8)
    assert len(decodes) == COUNT
    assert len(list(cache_dir.glob("*.npy"))) == 1
    second = dataset.images(order, 8)
    assert len(decodes) == COUNT                   # nothing decoded the second time
    np.testing.assert_array_equal(second, first)
    np.testing.assert_array_equal(second, expected(dataset, order, 8))
    # another size or another order is another array, decoded and kept on its own
    np.testing.assert_array_equal(dataset.images(order, 6), expected(dataset, order, 6))
    np.testing.assert_array_equal(dataset.images(order[::-1], 8), first[::-1])
    assert len(decodes) == 3 * COUNT
    assert len(list(cache_dir.glob("*.npy"))) == 3


def test_a_changed_file_is_decoded_again(tmp_path, cache_dir, decodes):
    dataset = png_folder(tmp_path / "data")
    indices = np.arange(COUNT)
    before = dataset.images(indices, 8)
    changed = tmp_path / "data" / "img-7.png"
    stat = changed.stat()
    Image.fromarray(np.full((12, 12, 3), 200, dtype=np.uint8)).save(changed)
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    after = dataset.images(indices, 8)
    assert len(decodes) == 2 * COUNT
    assert (after[7] == 200).all() and not (before[7] == 200).all()
    np.testing.assert_array_equal(np.delete(after, 7, 0), np.delete(before, 7, 0))


def test_a_change_to_the_decoder_is_a_new_key(tmp_path, cache_dir, monkeypatch):
    dataset = png_folder(tmp_path / "data", count=3)
    paths = [dataset.root / r.path for r in dataset.records]
    cache = DecodedCache.from_environment()
    key = cache.key(paths, 8)
    assert key == cache.key(paths, 8) and key != cache.key(paths, 9)
    monkeypatch.setattr(decoded_cache, "decoder_digest", lambda: "another decoder")
    assert cache.key(paths, 8) != key
    assert cache.key(paths + [tmp_path / "missing.png"], 8) is None


def test_small_calls_and_a_zero_limit_keep_nothing(tmp_path, cache_dir, monkeypatch, decodes):
    dataset = png_folder(tmp_path / "data")
    dataset.images(np.arange(MIN_CACHED_IMAGES - 1), 8)
    assert not cache_dir.exists()
    monkeypatch.setenv("ENVAD_DECODED_CACHE_MB", "0")
    dataset.images(np.arange(COUNT), 8)
    dataset.images(np.arange(COUNT), 8)
    assert not cache_dir.exists() and len(decodes) == MIN_CACHED_IMAGES - 1 + 2 * COUNT


@pytest.mark.parametrize("value", ["lots", "-1", "nan"])
def test_a_bad_limit_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("ENVAD_DECODED_CACHE_MB", value)
    with pytest.raises(ValueError, match="ENVAD_DECODED_CACHE_MB must be a number"):
        decoded_cache.limit_bytes()


def test_a_damaged_cache_file_is_decoded_again_with_a_warning(tmp_path, cache_dir, decodes,
                                                             caplog):
    dataset = png_folder(tmp_path / "data")
    indices = np.arange(COUNT)
    good = dataset.images(indices, 8)
    (cached,) = cache_dir.glob("*.npy")
    cached.write_bytes(cached.read_bytes()[:500])           # cut short
    with caplog.at_level(logging.WARNING, logger="envad.training.decoded_cache"):
        np.testing.assert_array_equal(dataset.images(indices, 8), good)
    assert "damaged" in caplog.text and len(decodes) == 2 * COUNT
    np.testing.assert_array_equal(np.load(cached), good)    # written whole again
    # an array of another shape under the key (a hand-copied file) is not believed either
    np.save(cached, good[:10])
    np.testing.assert_array_equal(dataset.images(indices, 8), good)
    assert len(decodes) == 3 * COUNT


def test_a_cache_that_cannot_be_written_costs_a_warning_not_the_run(tmp_path, monkeypatch,
                                                                   decodes, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ENVAD_CACHE_DIR", str(blocker))
    monkeypatch.setattr(DecodedCache, "_warned", set())
    dataset = png_folder(tmp_path / "data")
    with caplog.at_level(logging.WARNING, logger="envad.training.decoded_cache"):
        got = dataset.images(np.arange(COUNT), 8)
        dataset.images(np.arange(COUNT), 8)
    np.testing.assert_array_equal(got, expected(dataset, np.arange(COUNT), 8))
    assert caplog.text.count("not written") == 1           # once per process
    assert len(decodes) == 2 * COUNT


def test_the_least_recently_used_arrays_go_past_the_limit(tmp_path):
    arrays = {name: np.full((4, 8, 8, 3), i, dtype=np.uint8) for i, name in enumerate("abc")}
    one = arrays["a"].nbytes + 128                         # an array with its .npy header
    cache = DecodedCache(tmp_path / "decoded", limit=int(2.5 * one))
    cache.store("a", arrays["a"])
    cache.store("b", arrays["b"])
    for age, name in ((300, "a"), (200, "b")):              # a older than b
        path = tmp_path / "decoded" / f"{name}.npy"
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns - age * 10**9))
    assert cache.load("a", (4, 8, 8, 3)) is not None        # a used again: b is now oldest
    cache.store("c", arrays["c"])
    assert sorted(p.stem for p in (tmp_path / "decoded").glob("*.npy")) == ["a", "c"]
    assert cache.load("b", (4, 8, 8, 3)) is None
    # an array larger than the whole cache is not kept (and evicts nothing)
    DecodedCache(tmp_path / "decoded", limit=one // 2).store("d", arrays["a"])
    assert sorted(p.stem for p in (tmp_path / "decoded").glob("*.npy")) == ["a", "c"]
    assert not list((tmp_path / "decoded").glob("*.tmp"))
