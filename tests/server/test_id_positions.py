"""IdPositions: exact id -> position lookups over Arrow ids and sorted numpy hashes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from envad.server import id_positions
from envad.server.id_positions import IdPositions


def appended_in_pieces(ids: list[str], sizes: list[int]) -> IdPositions:
    held, start = IdPositions(), 0
    for size in sizes:
        held.append(pa.array(ids[start:start + size]))
        start += size
    held.append(ids[start:])                      # a Python list is accepted too
    return held


@pytest.fixture(params=["python hash", "colliding hash"])
def hashing(request, monkeypatch):
    if request.param == "colliding hash":         # only 8 hash values: long runs of equals
        monkeypatch.setattr(id_positions, "id_hash", lambda row_id: len(row_id) % 8)
    return request.param


def test_every_id_maps_to_its_position_and_nothing_else_is_held(hashing, monkeypatch):
    monkeypatch.setattr(id_positions, "MERGE_MIN", 50)   # merges happen at these sizes
    ids = [f"cam-{i % 7}/IMG_{i:05d}.JPG" for i in range(2_000)] + ["", "ü-ñ"]
    held = appended_in_pieces(ids, [1, 30, 30, 500, 3, 60, 900])
    assert len(held) == len(ids)
    expected = {row_id: i for i, row_id in enumerate(ids)}
    unknown = ["cam-0/IMG_99999.JPG", "cam-1/IMG_00000.JPG", "x"]
    queries = ids[::-37] + unknown
    assert held.positions(queries).tolist() == [expected.get(q, -1) for q in queries]
    assert [held.position(q) for q in queries] == [expected.get(q, -1) for q in queries]
    assert "cam-3/IMG_00010.JPG" in held and "x" not in held
    assert held.array().to_pylist() == ids
    assert held.at(np.array([5, 0])) == [ids[5], ids[0]]


def test_recent_ids_are_merged_into_the_sorted_arrays(monkeypatch):
    monkeypatch.setattr(id_positions, "MERGE_MIN", 10)
    held = IdPositions(pa.array([f"a{i}" for i in range(100)]))
    for i in range(9):
        held.append([f"b{i}"])
    assert len(held._recent) == 9 and len(held._sorted_hashes) == 100
    held.append(["b9", "b10", "b11", "b12"])       # 13 >= max(10, 100/8): merged
    assert not held._recent and len(held._sorted_hashes) == 113
    assert held.positions(["b0", "b12", "a99", "c"]).tolist() == [100, 112, 99, -1]


def test_an_empty_set_holds_nothing():
    held = IdPositions()
    assert len(held) == 0 and "a" not in held
    assert held.positions(["a", "b"]).tolist() == [-1, -1]
    assert held.array().to_pylist() == [] and held.at(np.array([], np.int64)) == []


def test_a_copy_holds_the_same_ids_and_grows_apart(hashing, monkeypatch):
    monkeypatch.setattr(id_positions, "MERGE_MIN", 10)
    held = IdPositions(pa.array([f"a{i}" for i in range(100)]))
    held.append(["r0", "r1"])                       # in the unmerged part when copied
    twin = held.copy()
    twin.append([f"t{i}" for i in range(20)])       # merged into the twin's arrays only
    held.append(["h0"])
    assert twin.positions(["a7", "r1", "t19", "h0"]).tolist() == [7, 101, 121, -1]
    assert held.positions(["a7", "r1", "t19", "h0"]).tolist() == [7, 101, -1, 102]
    assert len(twin) == 122 and len(held) == 103
    assert twin.array().to_pylist()[:102] == held.array().to_pylist()[:102]
    with pytest.raises(ValueError):                  # shared arrays are never written into
        held._sorted_hashes[0] = 0


def test_a_string_column_takes_values_from_its_chunks_without_joining_them():
    column = id_positions.StringColumn()
    values = [f"v{i}" for i in range(100)]
    for start in range(0, 100, 30):
        column.extend(pa.array(values[start:start + 30]))
    wanted = [99, 0, 30, 29, 61, 61, 90]
    assert column.at(np.array(wanted)) == [values[i] for i in wanted]
    assert len(column._chunks) == 4                 # nothing was copied into one chunk
    assert column.at([]) == [] and column.array().to_pylist() == values
    assert column.at([5, 95]) == ["v5", "v95"]      # and from the one joined chunk


def test_append_new_holds_each_new_id_once():
    held = IdPositions(pa.array(["a", "b"]))
    assert held.append_new(pa.chunked_array([["b", "c", "c"], ["d", "a"]])) == 2
    assert held.append_new(pa.array(["a", "d"])) == 0 and held.append_new(pa.array([])) == 0
    assert held.array().to_pylist()[:2] == ["a", "b"] and len(held) == 4
    assert sorted(held.array().to_pylist()[2:]) == ["c", "d"]


def test_a_growing_array_keeps_every_value_across_its_buffer_doublings():
    array = id_positions.GrowingArray(np.int64)
    for start in range(0, 5000, 700):
        array.extend(np.arange(start, min(start + 700, 5000)))
    assert len(array) == 5000
    np.testing.assert_array_equal(array.view(), np.arange(5000))
    array.view()[[3, 4999]] = -1
    assert array.view()[3] == array.view()[4999] == -1


def test_positions_take_32_bits_and_an_id_past_the_limit_is_refused(monkeypatch):
    held = IdPositions(pa.array(["a", "b"]))
    assert held._sorted_positions.dtype == np.uint32
    monkeypatch.setattr(id_positions, "MAX_IDS", 3)
    with pytest.raises(OverflowError, match="at most 3"):
        held.append(["c", "d"])
    assert len(held) == 2 and held.positions(["b", "c"]).tolist() == [1, -1]
