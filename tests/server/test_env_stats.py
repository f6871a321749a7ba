"""Durable running per-camera statistics."""

from __future__ import annotations

import numpy as np

from envad.server.env_stats import EnvStatistics


def test_running_mean_count_and_ignored_empty_camera(tmp_path):
    stats = EnvStatistics(tmp_path / "s.npz", 3)
    stats.update(["a", "a", "b", ""], np.array([[1, 2, 3], [3, 2, 1], [5, 5, 5], [9, 9, 9]]))
    stats.update(["a"], np.array([[2, 2, 2]]))
    a = stats.get("a")
    assert a.count == 3
    np.testing.assert_allclose(a.mean, [2, 2, 2])
    assert stats.get("") is None and stats.get("zzz") is None
    assert stats.counts() == {"a": 3, "b": 1}


def test_survives_a_restart_and_reset(tmp_path):
    path = tmp_path / "stats" / "model.npz"
    stats = EnvStatistics(path, 2)
    stats.update(["cam"] * 4, np.arange(8.0).reshape(4, 2))
    again = EnvStatistics(path, 2)
    assert again.get("cam").count == 4
    np.testing.assert_allclose(again.get("cam").mean, [3.0, 4.0])
    assert again.reset(["cam", "unknown"]) == ["cam"]
    assert EnvStatistics(path, 2).get("cam") is None
    assert not list(path.parent.glob(".envstats-*"))   # no temp file left behind


def test_memory_only_statistics_write_nothing(tmp_path):
    stats = EnvStatistics(None, 2)
    stats.update(["x"], np.ones((1, 2)))
    assert stats.get("x").count == 1 and not list(tmp_path.iterdir())
