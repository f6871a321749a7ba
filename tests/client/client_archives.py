"""Tiny archives in every source format, written by tests (a few 8x8 PNGs each)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image


def png_bytes(seed: int, size: int = 8) -> bytes:
    """A small distinct PNG: different seeds give different bytes (and sha256)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, format="PNG")
    return buf.getvalue()


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def make_folder_dataset(root: Path, envs=("cam0", "cam1"), per_env: int = 3,
                        events: dict[str, str] | None = None) -> Path:
    """Folder format with metadata.csv + ad_spec.json; label "6" is an anomaly.
    `events` ({path: event}) adds the optional event column ("" for the other rows)."""
    rows = []
    seed = 0
    for env in envs:
        (root / env).mkdir(parents=True, exist_ok=True)
        for i in range(per_env):
            rel = f"{env}/img{i}.png"
            (root / rel).write_bytes(png_bytes(seed))
            label = "6" if i == per_env - 1 else str(i % 3)
            rows.append({"path": rel, "env": env, "label": label, "split": "train",
                         "timestamp": f"2024-05-{1 + i % 28:02d}T10:00:00Z"})
            if events is not None:
                rows[-1]["event"] = events.get(rel, "")
            seed += 1
    write_csv(root / "metadata.csv", rows)
    (root / "ad_spec.json").write_text(json.dumps({"normal_a": [0, 1], "normal_b": [2]}))
    return root


def make_image_tree(root: Path, envs=("siteA", "siteB"), per_env: int = 2,
                    seed0: int = 100) -> Path:
    seed = seed0
    for env in envs:
        (root / env / "sub").mkdir(parents=True, exist_ok=True)
        for i in range(per_env):
            folder = root / env / ("sub" if i % 2 else "")
            (folder / f"IMG_{i:04d}.JPG".replace("JPG", "png")).write_bytes(png_bytes(seed))
            seed += 1
    (root / "notes.txt").write_text("not an image")
    (root / ".hidden.png").write_bytes(png_bytes(999))
    return root


def make_camtrap_dp(root: Path) -> Path:
    """Two deployments at two locations; media with media- and event-level observations."""
    (root / "media").mkdir(parents=True, exist_ok=True)
    write_csv(root / "deployments.csv", [
        {"deploymentID": "dep1", "locationID": "locA", "locationName": "Creek",
         "deploymentStart": "2024-01-01T00:00:00Z", "deploymentEnd": "2024-02-01T00:00:00Z"},
        {"deploymentID": "dep2", "locationID": "", "locationName": "Ridge",
         "deploymentStart": "2024-01-01T00:00:00Z", "deploymentEnd": "2024-02-01T00:00:00Z"},
    ])
    media = []
    for n, (dep, ts) in enumerate([("dep1", "2024-01-02T10:00:00Z"),
                                   ("dep1", "2024-01-02T10:00:05Z"),
                                   ("dep2", "2024-01-03T08:00:00+01:00"),
                                   ("dep2", "2024-01-04T09:00:00Z")]):
        name = f"m{n}.png"
        (root / "media" / name).write_bytes(png_bytes(200 + n))
        media.append({"mediaID": f"m{n}", "deploymentID": dep, "captureMethod": "activityDetection",
                      "timestamp": ts, "filePath": f"media/{name}", "filePublic": "true",
                      "fileName": name, "fileMediatype": "image/png"})
    media.append({"mediaID": "v1", "deploymentID": "dep2", "captureMethod": "activityDetection",
                  "timestamp": "2024-01-05T09:00:00Z", "filePath": "media/v1.mp4",
                  "filePublic": "true", "fileName": "v1.mp4", "fileMediatype": "video/mp4"})
    write_csv(root / "media.csv", media)
    write_csv(root / "observations.csv", [
        {"observationID": "o1", "deploymentID": "dep1", "mediaID": "", "eventID": "e1",
         "eventStart": "2024-01-02T09:59:59Z", "eventEnd": "2024-01-02T10:00:06Z",
         "observationLevel": "event", "observationType": "animal",
         "scientificName": "Vulpes vulpes"},
        {"observationID": "o2", "deploymentID": "dep2", "mediaID": "m2", "eventID": "",
         "eventStart": "", "eventEnd": "", "observationLevel": "media",
         "observationType": "animal", "scientificName": "Capreolus capreolus"},
        {"observationID": "o3", "deploymentID": "dep2", "mediaID": "m2", "eventID": "",
         "eventStart": "", "eventEnd": "", "observationLevel": "media",
         "observationType": "animal", "scientificName": "Sus scrofa"},
        {"observationID": "o4", "deploymentID": "dep2", "mediaID": "m3", "eventID": "",
         "eventStart": "", "eventEnd": "", "observationLevel": "media",
         "observationType": "blank", "scientificName": ""},
    ])
    (root / "datapackage.json").write_text(json.dumps({
        "profile": "https://raw.githubusercontent.com/tdwg/camtrap-dp/1.0/camtrap-dp-profile.json",
        "resources": [
            {"name": "deployments", "path": "deployments.csv"},
            {"name": "media", "path": "media.csv"},
            {"name": "observations", "path": "observations.csv"},
        ],
    }))
    return root


def make_coco_camera_traps(root: Path) -> Path:
    """Five images at two locations, as a public camera-trap dataset ships them: a burst
    of two (one seq_id), an image with two annotations, an empty frame, an image
    whose datetime does not parse, integer locations and ids."""
    (root / "images" / "loc7").mkdir(parents=True, exist_ok=True)
    (root / "images" / "loc9").mkdir(parents=True, exist_ok=True)
    images = []
    for n, (location, when, seq) in enumerate([(7, "2019-06-01 05:10:00", "s1"),
                                                (7, "2019-06-01 05:10:01", "s1"),
                                                (9, "2019:06:02 22:00:00", "s2"),
                                                (9, "2019-06-03 12:00:00", "s3"),
                                                (9, "not a date", None)]):
        name = f"images/loc{location}/{n}.png"
        (root / name).write_bytes(png_bytes(400 + n))
        image = {"id": 100 + n, "file_name": name, "location": location, "datetime": when,
                 "width": 8, "height": 8}
        if seq is not None:
            image["seq_id"] = seq
        images.append(image)
    data = {
        "info": {"version": "1.0", "description": "test"},
        "images": images,
        "annotations": [{"id": "a0", "image_id": 100, "category_id": 1},
                        {"id": "a1", "image_id": 101, "category_id": 1},
                        {"id": "a2", "image_id": 102, "category_id": 2},
                        {"id": "a3", "image_id": 102, "category_id": 1},
                        {"id": "a4", "image_id": 103, "category_id": 0}],
        "categories": [{"id": 0, "name": "empty"}, {"id": 1, "name": "fox"},
                       {"id": 2, "name": "deer"}],
    }
    path = root / "cct.json"
    path.write_text(json.dumps(data))
    return path


def make_megadetector_json(root: Path) -> Path:
    """Four files in two camera folders: one animal, one empty, one weak, one failure."""
    for n, rel in enumerate(["camA/a1.png", "camA/a2.png", "camB/b1.png"]):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(png_bytes(300 + n))
    results = {
        "info": {"format_version": "1.4", "detector": "md_v5a.0.0.pt",
                 "detector_metadata": {"typical_detection_threshold": 0.2}},
        "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
        "images": [
            {"file": "camA/a1.png",
             "detections": [{"category": "1", "conf": 0.93, "bbox": [0.1, 0.1, 0.3, 0.3]}]},
            {"file": "camA/a2.png", "detections": []},
            {"file": "camB/b1.png",
             "detections": [{"category": "1", "conf": 0.05, "bbox": [0, 0, 1, 1]}]},
            {"file": "camB/missing.png", "failure": "Failure image access", "detections": None},
        ],
    }
    path = root / "md_results.json"
    path.write_text(json.dumps(results))
    return path


def make_windows_megadetector_json(root: Path) -> Path:
    """MegaDetector output written on Windows: backslash paths, one absolute with a drive
    letter from the machine that ran MegaDetector, and one absolute POSIX path that
    exists here. Every image exists under `root`."""
    files = ["dep-A1/IMG_0001.png", "dep-A1/IMG_0002.png", "dep-B2/IMG_0003.png"]
    for n, rel in enumerate(files):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(png_bytes(400 + n))
    results = {
        "info": {"format_version": "1.4", "detector": "md_v5a.0.0.pt"},
        "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
        "classification_categories": {"1": "red fox"},
        "images": [
            {"file": "dep-A1\\IMG_0001.png",
             "detections": [{"category": "1", "conf": 0.9, "bbox": [0.1, 0.2, 0.3, 0.4],
                             "classifications": [["1", 0.8]]}]},
            {"file": "D:\\camtrap\\2024\\dep-A1\\IMG_0002.png", "detections": []},
            {"file": str((root / files[2]).resolve()),
             "detections": [{"category": "2", "conf": 1, "bbox": [0, 0, 0.5, 0.5]}]},
        ],
    }
    path = root / "md_windows.json"
    path.write_text(json.dumps(results))
    return path


def megadetector_errors(path: Path, image_root: Path | None = None) -> list[str]:
    """MegaDetector's own validator (megadetector-utils) on a batch output file: its
    errors, [] when valid; with `image_root`, every `file` must exist under it too.

    Importing the validator sets PIL's process-wide LOAD_TRUNCATED_IMAGES (MegaDetector's
    visualization module does so at import); it is put back, so that the server's
    truncated-image checks tested in the same process are unaffected."""
    from PIL import ImageFile

    before = ImageFile.LOAD_TRUNCATED_IMAGES
    try:
        from megadetector.postprocessing import validate_batch_results as validator
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = before
    options = validator.ValidateBatchResultsOptions()
    if image_root is not None:
        options.check_image_existence = True
        options.relative_path_base = str(image_root)
    return validator.validate_batch_results(str(path), options)["validation_results"]["errors"]
