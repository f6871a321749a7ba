"""Archive sources: every registered kind lists its items with the documented mapping."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path

import pytest

from client_archives import (
    make_camtrap_dp,
    make_coco_camera_traps,
    make_folder_dataset,
    make_image_tree,
    make_megadetector_json,
    make_windows_megadetector_json,
)
from envad.client.sources import SOURCES, detect_kind, open_source
from envad.errors import InvalidInput

MAKERS = {
    "folder": lambda root: make_folder_dataset(root),
    "image-tree": lambda root: make_image_tree(root),
    "camtrap-dp": lambda root: make_camtrap_dp(root),
    "coco-camera-traps": lambda root: make_coco_camera_traps(root),
    "megadetector": lambda root: make_megadetector_json(root),
    "manifest": None,  # built from another source in its own test
}


def test_every_source_kind_has_a_maker() -> None:
    assert set(MAKERS) == set(SOURCES)


@pytest.mark.parametrize("kind", sorted(k for k, v in MAKERS.items() if v))
def test_detection_and_common_contract(tmp_path, kind) -> None:
    maker = MAKERS[kind]
    assert maker is not None
    path = maker(tmp_path / "archive")
    assert detect_kind(path) == kind
    source = open_source(path)
    items = list(source)
    assert items, "a source must list its images"
    assert len({i.key for i in items}) == len(items), "keys must be unique"
    assert source.count() == len(items)
    assert list(source) == items, "listing must be stable"
    assert source.describe()["format"] == kind
    for item in items:
        if not item.skip_reason:
            assert item.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_folder_format_fields(tmp_path) -> None:
    root = make_folder_dataset(tmp_path / "ds")
    items = list(open_source(root))
    first = items[0]
    assert ((first.key, first.env, first.label, first.split)
            == ("cam0/img0.png", "cam0", "0", "train"))
    assert first.timestamp == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)
    assert first.id == ""
    assert [i.extra["is_anomaly"] for i in items[:3]] == [False, False, True]
    assert first.uri == str((root / "cam0/img0.png").resolve())


def test_folder_format_event_column(tmp_path) -> None:
    root = make_folder_dataset(tmp_path / "ds",
                               events={"cam0/img0.png": "b1", "cam0/img1.png": "b1"})
    assert "event" in (root / "metadata.csv").read_text().splitlines()[0]
    assert [i.event for i in open_source(root)][:3] == ["b1", "b1", ""]
    assert [i.event for i in open_source(make_folder_dataset(tmp_path / "plain"))][0] == ""


def test_folder_split_override_and_missing_columns(tmp_path) -> None:
    root = make_folder_dataset(tmp_path / "ds")
    assert {i.split for i in open_source(root, split="archive")} == {"archive"}
    (root / "metadata.csv").write_text("path,env\na.png,cam0\n")
    with pytest.raises(InvalidInput, match="missing column"):
        list(open_source(root))


def test_coco_camera_traps_fields(tmp_path, caplog) -> None:
    path = make_coco_camera_traps(tmp_path / "cct")
    items = list(open_source(path))
    assert [(i.key, i.id, i.env) for i in items] == [
        ("100", "100", "7"), ("101", "101", "7"), ("102", "102", "9"), ("103", "103", "9"),
        ("104", "104", "9")]
    assert [i.event for i in items] == ["s1", "s1", "s2", "s3", ""]
    assert [i.label for i in items] == ["fox", "fox", "deer;fox", "empty", ""]
    assert items[0].timestamp == datetime(2019, 6, 1, 5, 10, tzinfo=timezone.utc)
    assert items[2].timestamp == datetime(2019, 6, 2, 22, tzinfo=timezone.utc)   # EXIF style
    assert items[4].timestamp is None and "1 image(s) have a datetime" in caplog.text
    assert items[0].uri == str((path.parent / "images/loc7/0.png").resolve())
    assert {i.split for i in items} == {"archive"}
    moved = tmp_path / "elsewhere.json"
    moved.write_text(path.read_text())
    assert list(open_source(moved, image_root=path.parent))[0].uri == items[0].uri


def test_coco_camera_traps_refuses_what_it_cannot_map(tmp_path) -> None:
    import json

    path = make_coco_camera_traps(tmp_path / "cct")
    data = json.loads(path.read_text())
    data["images"].append(dict(data["images"][0]))
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidInput, match="image id '100' appears twice"):
        open_source(path)
    data["images"].pop()
    data["annotations"].append({"id": "x", "image_id": 100, "category_id": 42})
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidInput, match="category 42"):
        open_source(path)
    path.write_text('{"images": [{"file_name": "a.png"}]}')
    with pytest.raises(InvalidInput, match="lacks an id"):
        open_source(path)


def test_image_tree_env_is_first_folder(tmp_path) -> None:
    root = make_image_tree(tmp_path / "tree")
    items = list(open_source(root))
    assert [i.key for i in items] == [
        "siteA/IMG_0000.png", "siteA/sub/IMG_0001.png", "siteB/IMG_0000.png",
        "siteB/sub/IMG_0001.png"]
    assert [i.env for i in items] == ["siteA", "siteA", "siteB", "siteB"]
    assert all(i.id == "" and i.split == "archive" for i in items)


def test_camtrap_dp_mapping(tmp_path) -> None:
    root = make_camtrap_dp(tmp_path / "pkg")
    items = {i.key: i for i in open_source(root)}
    assert set(items) == {"dep1/m0", "dep1/m1", "dep2/m2", "dep2/m3", "dep2/v1"}
    assert all(i.id == i.key for i in items.values())
    assert items["dep1/m0"].env == "locA"
    assert items["dep2/m2"].env == "Ridge"  # empty locationID falls back to the name
    assert items["dep1/m0"].label == "Vulpes vulpes"  # event-level observation window
    assert items["dep1/m1"].label == "Vulpes vulpes"
    assert items["dep2/m2"].label == "Capreolus capreolus;Sus scrofa"
    assert items["dep2/m3"].label == "blank"
    assert items["dep2/m2"].timestamp == datetime(2024, 1, 3, 7, tzinfo=timezone.utc)
    assert items["dep2/v1"].skip_reason.startswith("not an image")
    by_deployment = {i.key: i.env for i in open_source(root, env_by="deployment")}
    assert by_deployment["dep1/m0"] == "dep1"


def test_camtrap_dp_rejects_unknown_deployment(tmp_path) -> None:
    root = make_camtrap_dp(tmp_path / "pkg")
    text = (root / "media.csv").read_text().replace("dep2", "dep9", 1)
    (root / "media.csv").write_text(text)
    with pytest.raises(InvalidInput, match="unknown deploymentID"):
        list(open_source(root))


def test_megadetector_skips_failures_and_optionally_empty(tmp_path) -> None:
    path = make_megadetector_json(tmp_path / "md")
    items = {i.key: i for i in open_source(path)}
    assert items["camA/a1.png"].env == "camA"
    assert items["camB/missing.png"].skip_reason == "megadetector failure: Failure image access"
    assert [k for k, i in items.items() if not i.skip_reason] == [
        "camA/a1.png", "camA/a2.png", "camB/b1.png"]
    detections = items["camA/a1.png"].extra["detections"]
    assert isinstance(detections, list) and detections[0]["conf"] == 0.93
    strict = {i.key: i.skip_reason for i in open_source(path, skip_empty=True)}
    assert strict["camA/a1.png"] == ""
    assert strict["camA/a2.png"] == strict["camB/b1.png"] == "no detection >= 0.2"
    loose = {i.key: i.skip_reason for i in open_source(path, skip_empty=True, min_conf=0.01)}
    assert loose["camB/b1.png"] == ""


def test_manifest_round_trip(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = make_folder_dataset(tmp_path / "ds")
    items = list(open_source(root))
    table = pa.table({
        "id": [hashlib.sha256(i.read_bytes()).hexdigest() for i in items],
        "uri": [i.uri for i in items],
        "env": [i.env for i in items],
        "label": [i.label for i in items],
        "split": [i.split for i in items],
        "timestamp": pa.array([i.timestamp for i in items], pa.timestamp("us", tz="UTC")),
        "event": [f"burst-{n // 2}" for n in range(len(items))],
    })
    pq.write_table(table, tmp_path / "rows.parquet")
    manifest = list(open_source(tmp_path / "rows.parquet"))
    assert [m.id for m in manifest] == table.column("id").to_pylist()
    assert [m.key for m in manifest] == [m.id for m in manifest]
    assert [(m.env, m.label, m.split, m.timestamp) for m in manifest] == [
        (i.env, i.label, i.split, i.timestamp) for i in items]
    assert [m.event for m in manifest] == table.column("event").to_pylist()


def test_unknown_kind_and_missing_path(tmp_path) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        open_source(tmp_path / "nope")
    with pytest.raises(InvalidInput, match="unknown source kind"):
        open_source(tmp_path, kind="zip")
    with pytest.raises(InvalidInput, match="does not take"):
        open_source(make_image_tree(tmp_path / "t"), kind="image-tree", env_by="location")


def test_an_image_tree_without_images_is_refused(tmp_path) -> None:
    (tmp_path / "cams" / "camA" / "day1").mkdir(parents=True)
    (tmp_path / "cams" / "camA" / "notes.txt").write_text("no images here")
    with pytest.raises(InvalidInput, match="holds no images"):
        open_source(tmp_path / "cams")


def test_megadetector_backslash_and_absolute_paths_resolve(tmp_path) -> None:
    root = tmp_path / "md"
    path = make_windows_megadetector_json(root)
    items = list(open_source(path))
    assert [i.key for i in items] == [
        "dep-A1\\IMG_0001.png", "D:\\camtrap\\2024\\dep-A1\\IMG_0002.png",
        str((root / "dep-B2/IMG_0003.png").resolve())]
    for item in items:
        assert Path(item.uri).is_file(), item.uri
    assert [i.env for i in items] == ["dep-A1", "dep-A1", "dep-B2"]


def test_camtrap_dp_non_public_media_flagged_and_skippable(tmp_path) -> None:
    root = make_camtrap_dp(tmp_path / "pkg")
    text = (root / "media.csv").read_text().splitlines()
    text[3] = text[3].replace(",true,", ",false,")  # dep2/m2: a person, not public
    (root / "media.csv").write_text("\n".join(text) + "\n")
    items = {i.key: i for i in open_source(root)}
    assert items["dep2/m2"].extra["filePublic"] is False and not items["dep2/m2"].skip_reason
    assert items["dep1/m0"].extra["filePublic"] is True
    skipping = {i.key: i for i in open_source(root, skip_non_public=True)}
    assert skipping["dep2/m2"].skip_reason == "not public (filePublic=false)"
    assert not skipping["dep1/m0"].skip_reason
    (root / "media.csv").write_text((root / "media.csv").read_text().replace(",false,", ",maybe,"))
    with pytest.raises(InvalidInput, match="filePublic must be true or false"):
        list(open_source(root))
