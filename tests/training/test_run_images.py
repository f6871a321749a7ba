"""Which images a run decodes, and the child that decodes them while torch is imported."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import sys

import numpy as np
import pytest

from envad.training import batches, run_images
from envad.training.run_images import (
    DecodeAhead,
    decode_groups,
    run_dataset,
    train_positions,
    val_positions,
    validation_rng,
)

FORK = "fork" in multiprocessing.get_all_start_methods()


def test_val_positions_sample_the_val_split_past_max_val(tiny_photodigits, monkeypatch):
    dataset = run_dataset(str(tiny_photodigits))
    every = dataset.indices("val", normal_only=True)
    assert len(every) > 5
    monkeypatch.setattr(run_images, "MAX_VAL", 5)
    sample = val_positions(dataset, set(), "bucket", validation_rng(0))
    assert len(sample) == 5 and set(sample) <= set(every)
    assert np.array_equal(sample, np.sort(sample))
    assert np.array_equal(sample, val_positions(dataset, set(), "bucket", validation_rng(0)))
    assert not np.array_equal(sample, val_positions(dataset, set(), "bucket", validation_rng(1)))


def test_class_task_validates_only_classes_seen_in_training(tiny_photodigits):
    dataset = run_dataset(str(tiny_photodigits))
    labels = sorted({dataset.records[int(i)].label for i in train_positions(dataset)})
    kept = val_positions(dataset, set(labels[:2]), "class", validation_rng(0))
    assert len(kept) > 0
    assert {dataset.records[int(i)].label for i in kept} <= set(labels[:2])
    assert len(val_positions(dataset, set(labels), "bucket", validation_rng(0))) > len(kept)


def test_decode_groups_chunk_the_training_images_then_validation(tiny_photodigits, monkeypatch):
    monkeypatch.setattr(run_images, "DECODE_CHUNK", 32)
    dataset = run_dataset(str(tiny_photodigits))
    train = train_positions(dataset)
    groups = decode_groups(dataset, 16, seed=0, task="bucket")
    assert np.array_equal(np.concatenate(groups[:-1]), train)
    assert [len(g) for g in groups[:-1]] == [32] * (len(train) // 32) + (
        [len(train) % 32] if len(train) % 32 else [])
    # a training set too large to keep is decoded batch by batch: only validation is known
    only_val = decode_groups(dataset, 16, seed=0, task="bucket", cache_bytes=0)
    assert len(only_val) == 1 and np.array_equal(only_val[0], groups[-1])


@pytest.mark.skipif(not FORK, reason="the child sees this test's settings only when forked")
@pytest.mark.parametrize("task", ["bucket", "class"])
def test_a_run_takes_every_group_from_the_child_and_gets_the_same_images(
        tiny_photodigits, tmp_path, monkeypatch, task):
    from envad.training.run import train
    from tiny_algorithms import tiny_config

    # several training groups and a sampled validation set, as a large dataset has
    monkeypatch.setattr(run_images, "DECODE_CHUNK", 32)
    monkeypatch.setattr(batches, "DECODE_CHUNK", 32)
    monkeypatch.setattr(run_images, "MAX_VAL", 7)
    monkeypatch.setenv("ENVAD_DECODED_CACHE_MB", "0")
    dataset = run_dataset(str(tiny_photodigits))
    expected = decode_groups(dataset, 16, seed=3, task=task)
    assert len(expected) >= 4 and len(expected[-1]) == 7
    runs = {}
    for name in ("ahead", "plain"):
        ahead = DecodeAhead(str(tiny_photodigits), size=16, seed=3, task=task,
                            start_method="fork") if name == "ahead" else None
        try:
            runs[name] = train(tiny_config(tiny_photodigits, tmp_path / name, "random",
                                           seed=3, task=task), progress=False, ahead=ahead)
        finally:
            if ahead is not None:
                ahead.close()
        if ahead is not None:
            assert ahead.taken == len(expected)       # nothing decoded twice
    metrics = [json.loads((runs[n] / "run.json").read_text())["epochs"] for n in runs]
    assert metrics[0] == metrics[1]
    import onnx

    graphs = [onnx.load(runs[n] / "encoder.onnx").graph.SerializeToString() for n in runs]
    assert graphs[0] == graphs[1]


def test_groups_come_with_the_pixels_the_run_would_decode(tiny_photodigits):
    dataset = run_dataset(str(tiny_photodigits))
    groups = decode_groups(dataset, 16, seed=0, task="bucket")
    with DecodeAhead(str(tiny_photodigits), size=16, seed=0, task="bucket") as ahead:
        for positions in reversed(groups):           # in any order
            got = ahead.take(dataset.group_key(positions, 16))
            assert got is not None and np.array_equal(got, dataset.images(positions, 16))
        assert ahead.take(dataset.group_key(groups[0], 16)) is None   # handed over once
        assert ahead.take(dataset.group_key(groups[0], 32)) is None   # another size
        assert ahead.taken == len(groups)


def test_a_child_that_cannot_read_the_dataset_leaves_the_decoding_to_the_run(tmp_path):
    with DecodeAhead(str(tmp_path / "missing"), size=16, seed=0, task="bucket") as ahead:
        assert ahead.take((str(tmp_path), 16, ("a.png",))) is None
        assert ahead.taken == 0


def test_a_child_stops_at_its_byte_budget(tiny_photodigits):
    dataset = run_dataset(str(tiny_photodigits))
    groups = decode_groups(dataset, 16, seed=0, task="bucket")
    first = len(groups[0]) * 16 * 16 * 3
    with DecodeAhead(str(tiny_photodigits), size=16, seed=0, task="bucket",
                     max_bytes=first) as ahead:
        assert ahead.take(dataset.group_key(groups[-1], 16)) is None
        assert ahead.take(dataset.group_key(groups[0], 16)) is not None


def test_a_killed_child_does_not_leave_the_run_waiting(tiny_photodigits):
    dataset = run_dataset(str(tiny_photodigits))
    groups = decode_groups(dataset, 16, seed=0, task="bucket")
    ahead = DecodeAhead(str(tiny_photodigits), size=16, seed=0, task="bucket")
    os.kill(ahead._process.pid, signal.SIGSTOP)      # caught before it sends anything
    os.kill(ahead._process.pid, signal.SIGKILL)
    try:
        assert ahead.take(dataset.group_key(groups[0], 16)) is None
    finally:
        ahead.close()
    assert ahead._process.exitcode == -signal.SIGKILL


def test_ctrl_c_is_left_to_the_parent(tiny_photodigits):
    before = signal.getsignal(signal.SIGINT)
    dataset = run_dataset(str(tiny_photodigits))
    groups = decode_groups(dataset, 16, seed=0, task="bucket")
    with DecodeAhead(str(tiny_photodigits), size=16, seed=0, task="bucket") as ahead:
        os.kill(ahead._process.pid, signal.SIGINT)   # as a terminal's Ctrl-C reaches it
        assert all(ahead.take(dataset.group_key(g, 16)) is not None for g in groups)
        assert ahead.take(("nothing", 16, ())) is None      # read on to the child's end
    assert ahead._process.exitcode == 0
    assert signal.getsignal(signal.SIGINT) == before         # restored in this process


def test_a_child_that_sent_everything_ends_by_itself(tiny_photodigits):
    dataset = run_dataset(str(tiny_photodigits))
    groups = decode_groups(dataset, 16, seed=0, task="bucket")
    with DecodeAhead(str(tiny_photodigits), size=16, seed=0, task="bucket") as ahead:
        assert all(ahead.take(dataset.group_key(g, 16)) is not None for g in groups)
    assert ahead._process.exitcode == 0        # read to its end, not terminated


def test_leaving_early_stops_the_child(tiny_photodigits):
    ahead = DecodeAhead(str(tiny_photodigits), size=16, seed=0, task="bucket")
    ahead.close()
    assert not ahead._process.is_alive()
    ahead.close()                                     # a second close is harmless


@pytest.mark.parametrize("setting, used", [(None, True), ("0", False)])
def test_envad_train_decodes_ahead_unless_turned_off(tiny_photodigits, tmp_path, monkeypatch,
                                                     caplog, setting, used):
    from envad.client import cli

    if setting is None:
        monkeypatch.delenv("ENVAD_DECODE_AHEAD", raising=False)
    else:
        monkeypatch.setenv("ENVAD_DECODE_AHEAD", setting)
    caplog.set_level(logging.DEBUG, logger="envad.training.run_images")
    monkeypatch.setattr(sys, "argv", ["envad"])
    code = cli.main(["train", "--data", str(tiny_photodigits), "--algorithm", "random",
                     "--size", "16", "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 0 and (tmp_path / "run" / "encoder.onnx").is_file()
    taken = [r.getMessage() for r in caplog.records if "decoded ahead" in r.getMessage()]
    assert taken == (["images decoded ahead: 2 groups taken (the child's exit code 0)"]
                     if used else [])
