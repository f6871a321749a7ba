"""Hits' uris and content hashes: held by position, or read with the candidates."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from envad.server.hit_strings import HeldStrings, ReadStrings


def test_held_strings_grow_by_position_and_fill_a_missing_hash():
    held = HeldStrings.empty()
    held.extend(pa.table({"uri": ["a", "b"], "sha256": ["ha", None]}))
    held.extend(pa.table({"uri": ["c"]}))
    assert held.uris_at(np.array([2, 0])) == ["c", "a"]
    assert held.hashes_at(np.array([0, 1, 2])) == ["ha", "", ""]


def test_read_strings_answer_for_the_positions_read_only():
    rows = pa.table({"uri": ["u3", "u8", None], "sha256": ["h3", "h8", "h9"]})
    read = ReadStrings.of(np.array([3, 8, 9]), rows)
    assert read.uris_at(np.array([9, 3, 3])) == ["", "u3", "u3"]
    assert read.hashes_at(np.array([8])) == ["h8"]
    assert read.uris_at(np.zeros(0, np.int64)) == []
    with pytest.raises(KeyError):
        read.uris_at(np.array([4]))
    with pytest.raises(KeyError):
        ReadStrings.of(np.zeros(0, np.int64), rows.slice(0, 0)).hashes_at(np.array([1]))
