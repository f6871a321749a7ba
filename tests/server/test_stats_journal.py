"""The statistics journal's record format: round trip, torn tails, failed appends."""

from __future__ import annotations

import numpy as np
import pytest

from envad.server.stats_journal import Journal, Update, decode_all, encode


def test_records_round_trip_with_any_camera_name():
    updates = [Update(1, "cam-ä/ü 🦌", 3, np.array([1.5, -2.0, 1e300])),
               Update(2, "", 1, np.zeros(3))]
    data = b"".join(encode(u) for u in updates)
    decoded, length = decode_all(data, 3)
    assert length == len(data)
    assert [(u.seq, u.env, u.count) for u in decoded] == [(1, "cam-ä/ü 🦌", 3), (2, "", 1)]
    np.testing.assert_array_equal(decoded[0].total, updates[0].total)


@pytest.mark.parametrize("cut", [1, 10, 30, 40])
def test_a_torn_record_ends_the_valid_prefix(cut):
    first, second = (encode(Update(i, "a", 1, np.ones(2))) for i in (1, 2))
    decoded, length = decode_all(first + second[:-cut], 2)
    assert [u.seq for u in decoded] == [1] and length == len(first)


def test_a_failed_append_leaves_no_partial_record(tmp_path, monkeypatch):
    journal = Journal(tmp_path / "j", 2)
    journal.append([Update(1, "a", 1, np.ones(2))])
    size = (tmp_path / "j").stat().st_size

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("envad.server.stats_journal.os.fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        journal.append([Update(2, "a", 1, np.ones(2))])
    monkeypatch.undo()
    assert (tmp_path / "j").stat().st_size == size and journal.records == 1
    journal.append([Update(3, "b", 1, np.ones(2))])
    journal.close()
    assert [u.env for u in Journal(tmp_path / "j", 2).read()] == ["a", "b"]
