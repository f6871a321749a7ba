"""iWildCam (WILDS v2.0) from a local root, with the paper's anomaly-detection split.

The paper (appendix "iWildCam"): classes with label < 125 are normal and form two
buckets, the rest are anomalies; only training locations with enough samples in each
normal bucket are kept; anomalies never enter training; the test set holds normal and
anomalous images from unseen locations only. Mapping onto envad splits:

- `train`: WILDS `train` images of kept locations, normal labels only;
- `val`:   WILDS `id_val` images (same locations as train) of kept locations, normals only;
- `test`:  WILDS `test` images (OOD locations), normals and anomalies; a test location
  with no normal image is dropped (every env needs normals, see data.py).

Environment = `location_remapped` (named `loc-N`), label = `y`. The boundary between the
two normal buckets is not given by the paper; ours (default 62: labels 0-61 are normal_a,
62-124 normal_b) halves the normal label range. Options are set in the spec string:
`iwildcam:ROOT?normal_max=125&bucket_boundary=62&min_per_bucket=20`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np

from envad.errors import NotFound
from envad.training.multienv import (
    ANOMALY,
    NORMAL_A,
    NORMAL_B,
    DatasetError,
    MultiEnvDataset,
    Record,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IWildCamSplit:
    """The AD split's settings. normal_max: the paper's 125; bucket_boundary: ours (the
    middle of 0..124); min_per_bucket: training images a location needs in each bucket."""

    normal_max: int = 125
    bucket_boundary: int = 62
    min_per_bucket: int = 20

    def __post_init__(self):
        if not 0 < self.bucket_boundary < self.normal_max:
            raise DatasetError(f"need 0 < bucket_boundary ({self.bucket_boundary}) < "
                               f"normal_max ({self.normal_max})")
        if self.min_per_bucket < 1:
            raise DatasetError("min_per_bucket must be at least 1")

    def bucket(self, y: int) -> int:
        if y < self.bucket_boundary:
            return NORMAL_A
        return NORMAL_B if y < self.normal_max else ANOMALY


def load_iwildcam_spec(text: str) -> MultiEnvDataset:
    """Parse `ROOT[?key=value&...]` (the part after `iwildcam:`) and load."""
    root, _, query = text.partition("?")
    known = {f.name for f in fields(IWildCamSplit)}
    options = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in known:
            raise DatasetError(f"unknown iwildcam option {key!r}; known: {sorted(known)}")
        try:
            options[key] = int(value)
        except ValueError as exc:
            raise DatasetError(f"iwildcam option {key} must be an integer, got {value!r}") \
                from exc
    if not root:
        raise DatasetError("iwildcam spec needs a root: iwildcam:ROOT (the folder holding "
                           "iwildcam_v2.0/)")
    return load_iwildcam(Path(root), IWildCamSplit(**options))


def load_iwildcam(root: Path, split: IWildCamSplit = IWildCamSplit()) -> MultiEnvDataset:
    """Open WILDS iWildCam under `root` (download=False) and apply the AD split."""
    from wilds import get_dataset  # optional, heavy: only when iWildCam is opened

    root = Path(root)
    if not (root / "iwildcam_v2.0" / "RELEASE_v2.0.txt").is_file():
        raise NotFound(f"no iWildCam v2.0 under {root}: expected "
                       f"{root / 'iwildcam_v2.0' / 'RELEASE_v2.0.txt'} and metadata.csv "
                       "(download the archive from https://wilds.stanford.edu/downloads)")
    try:
        wilds_ds = get_dataset("iwildcam", root_dir=str(root), download=False)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise DatasetError(f"cannot read iWildCam under {root}: {exc}") from exc

    split_names = {v: k for k, v in wilds_ds.split_dict.items()}
    splits = np.array([split_names[int(s)] for s in wilds_ds.split_array], dtype=object)
    labels = wilds_ds.y_array.numpy().astype(np.int64)
    meta = wilds_ds.metadata_array.numpy()
    column = {name: i for i, name in enumerate(wilds_ds.metadata_fields)}
    locations = meta[:, column["location"]]
    files = np.asarray(wilds_ds._input_array)   # file names under DATA_DIR/train (no accessor)
    buckets = np.array([split.bucket(int(y)) for y in labels])

    kept = kept_locations(locations[splits == "train"], buckets[splits == "train"],
                          split.min_per_bucket)
    if not kept:
        raise DatasetError(f"no iWildCam training location has {split.min_per_bucket} "
                           "training images in each normal bucket; lower min_per_bucket")
    in_kept = np.isin(locations, list(kept))
    normal = buckets != ANOMALY
    ours = np.full(len(splits), "", dtype=object)
    ours[(splits == "train") & in_kept & normal] = "train"
    ours[(splits == "id_val") & in_kept & normal] = "val"
    test = splits == "test"
    test_with_normals = set(locations[test & normal].tolist())
    dropped = set(locations[test].tolist()) - test_with_normals
    if dropped:
        log.info("iwildcam: dropping %d test location(s) with no normal image", len(dropped))
    ours[test & np.isin(locations, list(test_with_normals))] = "test"

    records = []
    for i in np.flatnonzero(ours != ""):
        ts = meta[i, [column[k] for k in ("year", "month", "day", "hour", "minute", "second")]]
        records.append(Record(
            id=str(files[i]), path=str(files[i]), env=f"loc-{int(locations[i])}",
            label=str(int(labels[i])), split=str(ours[i]), bucket=int(buckets[i]),
            is_anomaly=bool(buckets[i] == ANOMALY),
            timestamp="{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}".format(*map(int, ts))))
    log.info("iwildcam: %d training locations kept, %d images", len(kept), len(records))
    return MultiEnvDataset("iwildcam", Path(wilds_ds.data_dir) / "train", records)


def kept_locations(locations: np.ndarray, buckets: np.ndarray, minimum: int) -> list[int]:
    """Locations with at least `minimum` images in each of the two normal buckets."""
    keep = []
    for location in np.unique(locations):
        here = buckets[locations == location]
        if (here == NORMAL_A).sum() >= minimum and (here == NORMAL_B).sum() >= minimum:
            keep.append(int(location))
    return keep
