"""Multi-environment image datasets: images labelled with (env, label, split, bucket).

Every source (the folder format, iWildCam, PhotoDigits, which writes the folder format)
becomes one `MultiEnvDataset` (multienv.py); `load_dataset(spec)` opens any of them.

Folder format (ARCHITECTURE.md): `DIR/metadata.csv` with columns `path,env,label,split`
(optional `id,timestamp,is_anomaly`), paths relative to DIR, and `DIR/ad_spec.json`
`{"normal_a": [...], "normal_b": [...]}`; every other label is an anomaly.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from envad.errors import NotFound
from envad.training.iwildcam import load_iwildcam_spec
from envad.training.multienv import (
    ANOMALY,
    NORMAL_A,
    NORMAL_B,
    SPLITS,
    DatasetError,
    MultiEnvDataset,
    Record,
)

REQUIRED_COLUMNS = ("path", "env", "label", "split")
_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f", ""}


def load_dataset(spec: str | Path) -> MultiEnvDataset:
    """Open a dataset from a spec: a folder-format DIR, or `iwildcam:ROOT[?key=value&...]`."""
    text = str(spec)
    if text.startswith("iwildcam:"):
        return load_iwildcam_spec(text[len("iwildcam:"):])
    return load_folder(Path(text))


def read_ad_spec(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """The two normal label sets from ad_spec.json (every other label is an anomaly)."""
    if not path.is_file():
        raise DatasetError(f"{path} is missing: write {{\"normal_a\": [labels...], "
                           "\"normal_b\": [labels...]}} (every other label is an anomaly)")
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(spec, dict) or not all(
            isinstance(spec.get(k), list) and spec[k] for k in ("normal_a", "normal_b")):
        raise DatasetError(f"{path} must hold non-empty lists 'normal_a' and 'normal_b'")
    normal_a = frozenset(str(v) for v in spec["normal_a"])
    normal_b = frozenset(str(v) for v in spec["normal_b"])
    if normal_a & normal_b:
        raise DatasetError(f"{path}: labels {sorted(normal_a & normal_b)} are in both "
                           "normal_a and normal_b")
    return normal_a, normal_b


def bucket_of(label: str, normal_a: frozenset[str], normal_b: frozenset[str]) -> int:
    if label in normal_a:
        return NORMAL_A
    if label in normal_b:
        return NORMAL_B
    return ANOMALY


def load_folder(root: Path) -> MultiEnvDataset:
    """Read and validate a folder-format dataset (see the module docstring)."""
    root = Path(root)
    if not root.is_dir():
        raise NotFound(f"dataset folder {root} does not exist")
    csv_path = root / "metadata.csv"
    if not csv_path.is_file():
        raise DatasetError(f"{csv_path} is missing: the folder format needs metadata.csv "
                           f"with columns {','.join(REQUIRED_COLUMNS)}")
    normal_a, normal_b = read_ad_spec(root / "ad_spec.json")
    with open(csv_path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns = [c.strip() for c in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise DatasetError(f"{csv_path}: missing column(s) {missing}; found {columns}")
        rows = [{(k or "").strip(): (v or "").strip() for k, v in row.items()}
                for row in reader]
    if not rows:
        raise DatasetError(f"{csv_path} has no rows")
    records = [_record(row, line, csv_path, normal_a, normal_b)
               for line, row in enumerate(rows, start=2)]
    _check_records(records, root, csv_path)
    return MultiEnvDataset(root.name, root, records)


def _record(row: dict, line: int, csv_path: Path, normal_a, normal_b) -> Record:
    where = f"{csv_path.name} line {line}"
    for column in REQUIRED_COLUMNS:
        if not row.get(column):
            raise DatasetError(f"{where}: empty '{column}'")
    if row["split"] not in SPLITS:
        raise DatasetError(f"{where}: unknown split {row['split']!r}; expected one of "
                           f"{', '.join(SPLITS)}")
    bucket = bucket_of(row["label"], normal_a, normal_b)
    if "is_anomaly" in row:
        flag = row["is_anomaly"].lower()
        if flag not in _TRUE | _FALSE:
            raise DatasetError(f"{where}: is_anomaly must be true/false, got {flag!r}")
        if (flag in _TRUE) != (bucket == ANOMALY):
            raise DatasetError(f"{where}: is_anomaly={row['is_anomaly']} disagrees with "
                               f"ad_spec.json for label {row['label']!r}")
    return Record(id=row.get("id") or row["path"], path=row["path"], env=row["env"],
                  label=row["label"], split=row["split"], bucket=bucket,
                  is_anomaly=bucket == ANOMALY, timestamp=row.get("timestamp") or None)


def _check_records(records: Sequence[Record], root: Path, csv_path: Path) -> None:
    duplicates = [k for k, n in Counter(r.id for r in records).items() if n > 1]
    if duplicates:
        raise DatasetError(f"{csv_path}: duplicate ids {duplicates[:5]}")
    missing = [r.path for r in records if not (root / r.path).is_file()]
    if missing:
        raise DatasetError(f"{len(missing)} image file(s) listed in {csv_path.name} do not "
                           f"exist under {root}, e.g. {missing[:3]}")
    check_envs_have_normals(records, str(csv_path))
    if not any(r.split == "train" and not r.is_anomaly for r in records):
        raise DatasetError(f"{csv_path}: no normal images in split 'train'; training "
                           "needs labelled normals (ad_spec.json normal_a / normal_b)")


def check_envs_have_normals(records: Sequence[Record], where: str) -> None:
    """Every environment needs normal images: detectors are fit on them, per-camera
    ROC-AUC needs both classes."""
    envs = {r.env for r in records}
    with_normals = {r.env for r in records if not r.is_anomaly}
    empty = sorted(envs - with_normals)
    if empty:
        raise DatasetError(f"{where}: environment(s) {empty} have no normal images "
                           "(labels in ad_spec.json normal_a / normal_b)")
