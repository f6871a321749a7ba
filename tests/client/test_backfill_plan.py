"""The backfill plan both engines share: the item walk (filters, finished keys, limit,
skip reasons, batch cuts) and the job header, on real archives in a temp dir."""

from __future__ import annotations

import json

import pytest

from client_archives import make_folder_dataset, make_megadetector_json
from envad.client.backfill_plan import (
    BackfillOptions,
    check_some_wanted,
    count_wanted,
    item_outcome,
    job_header,
    plan_batches,
)
from envad.client.checkpoint import Checkpoint, CheckpointMismatch
from envad.client.sources import open_source


def walk(source, options, done=frozenset(), size=64):
    return list(plan_batches(source, options, done.__contains__, size))


def keys(batches) -> list[str]:
    return [i.key for b in batches for i in b.items]


def test_filters_limit_and_batch_cuts(tmp_path) -> None:
    source = open_source(make_folder_dataset(tmp_path / "ds", envs=("cam0", "cam1"), per_env=5))
    everything = walk(source, BackfillOptions(), size=4)
    assert [len(b.items) for b in everything] == [4, 4, 2]
    assert keys(everything) == [i.key for i in source]

    only_cam1 = BackfillOptions(envs=("cam1",))
    assert {key.split("/")[0] for key in keys(walk(source, only_cam1))} == {"cam1"}
    assert count_wanted(source, only_cam1) == 5
    assert keys(walk(source, BackfillOptions(limit=3))) == keys(everything)[:3]


def test_finished_keys_are_counted_not_sent_and_limit_counts_new_items(tmp_path) -> None:
    source = open_source(make_folder_dataset(tmp_path / "ds", per_env=3))
    all_keys = [i.key for i in source]
    done = frozenset(all_keys[:2])
    batches = walk(source, BackfillOptions(limit=2), done)
    assert sum(b.already_done for b in batches) == 2
    assert keys(batches) == all_keys[2:4]
    finished = walk(source, BackfillOptions(), frozenset(all_keys))
    assert len(finished) == 1 and finished[0].already_done == len(all_keys)
    assert not finished[0].items and not finished[0].skipped


def test_skip_reasons_become_outcomes(tmp_path) -> None:
    source = open_source(make_megadetector_json(tmp_path / "md"), skip_empty=True)
    batches = walk(source, BackfillOptions(scores=True))
    skipped = [o for b in batches for o in b.skipped]
    assert {o.key for o in skipped} == {"camA/a2.png", "camB/b1.png", "camB/missing.png"}
    assert all(o.status == "skipped" and o.reason for o in skipped)
    assert all(o.item["env"] for o in skipped)  # score jobs keep the item for the outputs
    assert keys(batches) == ["camA/a1.png"]
    ingest_only = [o for b in walk(source, BackfillOptions()) for o in b.skipped]
    assert all(not o.item for o in ingest_only)


def test_job_header_per_engine_and_checkpoint_resume(tmp_path) -> None:
    source = open_source(make_folder_dataset(tmp_path / "ds"))
    options = BackfillOptions(splits=("train",), envs=("cam1", "cam0"))
    service = job_header(source, options, "m1", tmp_path / "data")
    ray = job_header(source, options, "m1", tmp_path / "data", engine="ray")
    assert service["mode"] == ray["mode"] == "ingest"
    assert service["engine"] == "service" and ray["engine"] == "ray"
    assert service["bundle_id"] == ray["bundle_id"] == ""
    assert service["envs"] == ["cam0", "cam1"] and ray["splits"] == ["train"]
    assert job_header(source, BackfillOptions(scores=True, store=False), "m1", "d")["mode"] \
        == "score"
    # a checkpoint written by one engine is not resumed by the other
    path = tmp_path / "ck.jsonl"
    first = next(iter(source))
    with Checkpoint(path, service, resume=False) as checkpoint:
        checkpoint.record([item_outcome(first, "ok")])
    with Checkpoint(path, service, resume=True) as checkpoint:
        assert checkpoint.is_done(first.key)
    with pytest.raises(CheckpointMismatch, match="belongs to another job"):
        Checkpoint(path, ray, resume=True)


def test_a_checkpoint_of_an_unknown_older_format_is_refused_naming_the_rerun(tmp_path) -> None:
    """A checkpoint written by a development version before envad 0.1.0 (its header
    without engine, its version 1) is refused with what to do, not resumed."""
    source = open_source(make_folder_dataset(tmp_path / "ds"))
    header = job_header(source, BackfillOptions(), "m1", tmp_path / "data")
    older = {k: v for k, v in header.items() if k not in ("engine", "bundle_id")}
    path = tmp_path / "ck.jsonl"
    first = next(iter(source))
    with Checkpoint(path, header, resume=False) as checkpoint:
        checkpoint.record([item_outcome(first, "ok")])
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(json.dumps({"header": {**older, "version": 1}}) + "\n" + "".join(lines[1:]))
    with pytest.raises(CheckpointMismatch, match=r"unknown older format \(version 1, .*"
                                                 r"rerun the backfill without --resume"):
        Checkpoint(path, header, resume=True)


def test_filters_that_select_nothing_are_refused_naming_what_is_there(tmp_path) -> None:
    from envad.errors import InvalidInput

    source = open_source(make_folder_dataset(tmp_path / "ds"))
    check_some_wanted(source, BackfillOptions(splits=("train",)))
    with pytest.raises(InvalidInput, match=r"no item .* matches .*environments \['cam0', "
                                           r"'cam1'\] and splits \['train'\]"):
        check_some_wanted(source, BackfillOptions(splits=("archive",)))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metadata.csv").write_text("path,env,label,split\n")
    with pytest.raises(InvalidInput, match="holds no images"):
        check_some_wanted(open_source(tmp_path / "empty"), BackfillOptions())
