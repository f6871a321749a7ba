"""The Ray driver's stored ids: read once from a real Lance table, then only from the
fragments committed since (another writer's, a compaction's), with exact lookups."""

from __future__ import annotations

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

from envad.client.ray_stored_ids import StoredIds  # noqa: E402


def write(uri, ids: list[str], mode: str = "append") -> None:
    lance.write_dataset(pa.table({"id": ids, "value": list(range(len(ids)))}), uri, mode=mode)


class CountingDataset:
    """A Lance dataset whose fragments count the reads of their rows."""

    def __init__(self, dataset) -> None:
        self.dataset, self.reads = dataset, 0

    def get_fragments(self):
        return [CountingFragment(f, self) for f in self.dataset.get_fragments()]


class CountingFragment:
    def __init__(self, fragment, owner: CountingDataset) -> None:
        self.fragment, self.owner = fragment, owner
        self.fragment_id = fragment.fragment_id

    def to_table(self, **kwargs):
        self.owner.reads += 1
        return self.fragment.to_table(**kwargs)


def test_ids_are_read_once_then_only_from_new_fragments(tmp_path):
    uri = str(tmp_path / "t.lance")
    write(uri, [f"a{i}" for i in range(100)], mode="create")
    write(uri, [f"b{i}" for i in range(50)])
    first = CountingDataset(lance.dataset(uri))
    held = StoredIds(first)
    assert len(held) == 150 and first.reads == 2
    assert held.stored(["a0", "b49", "c0", "a0"]) == {"a0", "b49"}

    unchanged = CountingDataset(lance.dataset(uri))
    assert held.refresh(unchanged) == 0 and unchanged.reads == 0

    write(uri, [f"c{i}" for i in range(30)])       # another writer's commit
    later = CountingDataset(lance.dataset(uri))
    assert held.refresh(later) == 30 and later.reads == 1
    assert held.stored(["c29", "c30"]) == {"c29"}


def test_a_compaction_rewrites_fragments_without_adding_ids_twice(tmp_path):
    uri = str(tmp_path / "t.lance")
    write(uri, ["x", "y"], mode="create")
    for i in range(4):
        write(uri, [f"z{i}"])
    held = StoredIds(lance.dataset(uri))
    dataset = lance.dataset(uri)
    dataset.optimize.compact_files()
    compacted = lance.dataset(uri)
    assert len(compacted.get_fragments()) < 5
    assert held.refresh(compacted) == 0 and len(held) == 6
    assert held.stored(["x", "z3", "w"]) == {"x", "z3"}


def test_ids_repeated_within_new_rows_are_held_once(tmp_path):
    held = StoredIds(_empty(tmp_path))
    assert held.add(pa.array(["p", "q", "p"])) == 2
    assert held.add(pa.array(["q", "r"])) == 1
    assert len(held) == 3 and held.stored(["p", "r", "s"]) == {"p", "r"}


def _empty(tmp_path):
    uri = str(tmp_path / "empty.lance")
    lance.write_dataset(pa.table({"id": pa.array([], pa.string())}), uri)
    return lance.dataset(uri)
