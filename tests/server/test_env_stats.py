"""Durable running per-camera statistics: snapshot + journal, kills and torn writes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from envad.server.env_stats import JOURNAL_SUFFIX, EnvStatistics
from envad.server.stats_journal import Update, decode_all, encode


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


def _journal(path):
    return path.with_name(path.name + JOURNAL_SUFFIX)


def test_an_update_appends_to_the_journal_and_leaves_the_snapshot_alone(tmp_path):
    path = tmp_path / "s.npz"
    stats = EnvStatistics(path, 2, compact_every=100)
    for cam in range(20):                              # many cameras
        stats.update([f"cam{cam}"], np.ones((1, 2)))
    stats.reset(["cam19"])                             # writes a snapshot
    snapshot = path.read_bytes()
    journal_before = _journal(path).stat().st_size
    stats.update(["cam0", "cam0", "cam1"], np.array([[1.0, 1], [3, 3], [5, 5]]))
    assert path.read_bytes() == snapshot               # the snapshot was not rewritten
    # one record per camera of the batch, its size independent of the camera count
    grown = _journal(path).stat().st_size - journal_before
    assert grown == 2 * len(encode(Update(1, "cam0", 1, np.zeros(2))))
    again = EnvStatistics(path, 2)
    assert again.get("cam0").count == 3 and again.get("cam1").count == 2
    np.testing.assert_allclose(again.get("cam0").mean, [5 / 3, 5 / 3])
    assert again.get("cam19") is None and again.get("cam18").count == 1


def test_compaction_writes_a_snapshot_and_empties_the_journal(tmp_path):
    path = tmp_path / "s.npz"
    stats = EnvStatistics(path, 2, compact_every=5)
    for i in range(12):
        stats.update(["a"], np.full((1, 2), float(i)))
    assert path.is_file()
    assert len(decode_all(_journal(path).read_bytes(), 2)[0]) == 2    # 12 = 5 + 5 + 2
    again = EnvStatistics(path, 2)
    assert again.get("a").count == 12
    np.testing.assert_allclose(again.get("a").mean, [5.5, 5.5])


def test_a_kill_between_snapshot_and_journal_truncation_counts_nothing_twice(tmp_path):
    path = tmp_path / "s.npz"
    stats = EnvStatistics(path, 2, compact_every=4)
    for _ in range(3):
        stats.update(["a"], np.ones((1, 2)))
    journal_before = _journal(path).read_bytes()        # 3 records, no snapshot yet
    stats.update(["a"], np.ones((1, 2)))               # 4th: snapshot, journal emptied
    assert path.is_file() and _journal(path).stat().st_size == 0
    # the process died after the snapshot's rename, before the journal was emptied
    last = encode(Update(4, "a", 1, np.ones(2)))
    _journal(path).write_bytes(journal_before + last)
    assert EnvStatistics(path, 2).get("a").count == 4


def test_a_torn_or_corrupt_journal_tail_is_cut_and_appends_go_on(tmp_path):
    path = tmp_path / "s.npz"
    stats = EnvStatistics(path, 3)
    stats.update(["a"], np.ones((1, 3)))
    stats.update(["b"], np.ones((1, 3)))
    stats.close()
    whole = _journal(path).read_bytes()
    record = len(whole) // 2
    _journal(path).write_bytes(whole + whole[:record - 5])          # killed mid-append
    again = EnvStatistics(path, 3)
    assert again.counts() == {"a": 1, "b": 1}
    assert _journal(path).stat().st_size == len(whole)              # tail cut off
    again.update(["c"], np.ones((1, 3)))
    again.close()
    assert EnvStatistics(path, 3).counts() == {"a": 1, "b": 1, "c": 1}
    flipped = bytearray(_journal(path).read_bytes())
    flipped[record + 30] ^= 0xFF                                    # corrupt record 2
    _journal(path).write_bytes(bytes(flipped))
    assert EnvStatistics(path, 3).counts() == {"a": 1}


def test_a_snapshot_of_an_unknown_older_format_is_refused_naming_the_reset(tmp_path):
    """A snapshot written by a development version before envad 0.1.0 (no seq)."""
    path = tmp_path / "s.npz"
    np.savez(path, names=np.array(["old"]), counts=np.array([4]),
             sums=np.array([[8.0, 4.0]]))
    with pytest.raises(ValueError, match=r"unknown older format \(no seq\): remove the "
                                         r"file .*envad reset-camera-stats"):
        EnvStatistics(path, 2)


def _descriptors_of(path) -> list[str]:
    """This process's open descriptors on `path` (Linux's /proc)."""
    folder = Path("/proc/self/fd")
    found = []
    for fd in folder.iterdir():
        try:
            if Path(os.readlink(fd)) == Path(path):
                found.append(fd.name)
        except OSError:     # closed while listed
            pass
    return found


def test_the_journal_is_open_only_while_written_and_loses_nothing(tmp_path):
    """No descriptor of the journal stays open between updates, so the file system under
    a running server can be remounted read-only; updates after close still land."""
    path = tmp_path / "s.npz"
    stats = EnvStatistics(path, 2)
    stats.update(["cam"], np.array([[1.0, 1.0]]))
    journal = stats._journal
    assert journal is not None and journal.path.stat().st_size > 0
    assert _descriptors_of(journal.path) == []
    stats.close()
    stats.update(["cam"], np.array([[3.0, 3.0]]))   # an update after close is written
    assert _descriptors_of(journal.path) == []
    stats.close()
    again = EnvStatistics(path, 2)
    assert again.get("cam").count == 2
    np.testing.assert_allclose(again.get("cam").mean, [2.0, 2.0])
