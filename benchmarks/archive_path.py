"""The README's archive path on folders built from a dataset's unseen cameras.

A user points envad at a folder of their own camera-trap images and fits on the folder
itself (`envad backfill` + `envad fit`, or `envad scan`): new content is among the fit
images, in bursts. This builds such folders from the `test` split of a folder-format
dataset (PhotoDigits: the unseen cameras): per camera every normal image, 7 minutes
apart, and new content at a share of the camera's images, in bursts of frames 2 s apart
(one event each), at seeded places; JPEGs with EXIF capture times, the new content's
files named NEW_*. Each folder is scanned three ways with the same encoder:

- `archive`: fit on the folder itself (`envad scan FOLDER`, the README's path);
- `reference`: fit on a small folder of known-normal images of the training cameras
  (`--reference`, their `val` split);
- `clean`: fit on the training cameras' normal `train` images (the demo's fit).

It prints the ensemble's pooled ROC-AUC of each and each one's difference from
`clean`, measured in the same run, and appends one JSON line to
docs/results/archive-path/results.jsonl.

    python -m benchmarks.archive_path --data var/demo/photodigits \
        --model var/demo/models/<encoder>.onnx
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks.common import machine

EXIF_IFD, DATETIME_ORIGINAL = 0x8769, 0x9003
FIRST_SHOT = datetime(2024, 6, 1, 6, 0, 0)
OUT = Path("docs/results/archive-path/results.jsonl")


def _jpeg(path: Path, taken: datetime) -> bytes:
    exif = Image.Exif()
    exif.get_ifd(EXIF_IFD)[DATETIME_ORIGINAL] = taken.strftime("%Y:%m:%d %H:%M:%S")
    out = io.BytesIO()
    with Image.open(path) as image:
        image.convert("RGB").save(out, format="JPEG", quality=95, exif=exif)
    return out.getvalue()


def _rows(data: Path) -> list[dict]:
    with open(data / "metadata.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _is_new(row: dict) -> bool:
    return row["is_anomaly"].strip().lower() == "true"


def build_archive(data: Path, out: Path, share: float, burst: int, seed: int) -> Path:
    """`out/<camera>/IMG_n.JPG` (normal) and `NEW_n.JPG` (new content) of each test
    camera: every normal image, new content at `share` of the camera's images in
    bursts of `burst` frames of one class (2 s apart), at seeded places in time."""
    rng = np.random.default_rng([seed, 43])
    rows = [r for r in _rows(data) if r["split"] == "test"]
    for env in sorted({r["env"] for r in rows}):
        normal = [r for r in rows if r["env"] == env and not _is_new(r)]
        new = [r for r in rows if r["env"] == env and _is_new(r)]
        wanted = int(round(share / (1.0 - share) * len(normal)))
        bursts: list[list[dict]] = []
        for label in rng.permutation(sorted({r["label"] for r in new})):
            of_label = [r for r in new if r["label"] == label]
            while len(of_label) >= burst and sum(len(b) for b in bursts) + burst <= wanted:
                bursts.append(of_label[:burst])
                of_label = of_label[burst:]
        places = set(rng.choice(len(normal), size=len(bursts), replace=False).tolist())
        folder = out / env
        folder.mkdir(parents=True, exist_ok=True)
        taken, burst_iter = FIRST_SHOT, iter(bursts)
        for n, row in enumerate(normal):
            taken += timedelta(minutes=7)
            (folder / f"IMG_{n:04d}.JPG").write_bytes(_jpeg(data / row["path"], taken))
            if n in places:
                for k, frame in enumerate(next(burst_iter)):
                    shot = taken + timedelta(minutes=1, seconds=2 * k)
                    (folder / f"NEW_{n:04d}_{k}.JPG").write_bytes(
                        _jpeg(data / frame["path"], shot))
    return out


def build_normals(data: Path, out: Path, split: str) -> Path:
    """`out/<camera>/IMG_n.JPG`: the training cameras' normal images of `split`."""
    taken = FIRST_SHOT
    for n, row in enumerate(r for r in _rows(data) if r["split"] == split and not _is_new(r)):
        taken += timedelta(minutes=7)
        folder = out / row["env"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"IMG_{n:05d}.JPG").write_bytes(_jpeg(data / row["path"], taken))
    return out


def scan_auc(archive: Path, model: Path, reference: Path | None, work: Path,
             scoring: dict | None = None) -> dict:
    """`envad scan` of the archive (in-process) with `scoring` (space, detectors, score
    adaptation; None: the server's defaults), its ensemble's pooled ROC-AUC."""
    from sklearn.metrics import roc_auc_score

    from envad.client.scan import ScanOptions, run_scan

    scores = work / "scores.jsonl"
    scoring = scoring or {}
    report = run_scan(ScanOptions(source=archive, model=model, reference=reference,
                                  data_dir=work / "data", scores_out=scores, top=0,
                                  detectors=tuple(scoring.get("detectors", ())),
                                  space=scoring.get("space", ""),
                                  score_adaptation=scoring.get("score_adaptation", ""),
                                  progress=False))
    records = [json.loads(line) for line in scores.read_text().splitlines()]
    records = [r for r in records if r.get("status") == "ok"]
    truth = [Path(r["key"]).name.startswith("NEW_") for r in records]
    return {"roc_auc": round(float(roc_auc_score(truth, [r["ensemble"] for r in records])), 4),
            "images": len(records), "new_content": int(sum(truth)),
            "fit_rows": report.fit_rows}


def shipped_scoring() -> dict:
    """The default pipeline's scoring, which `envad scan` fits when none is named."""
    from envad.pipeline import DEFAULT_PIPELINE

    return {"space": DEFAULT_PIPELINE.space, "detectors": list(DEFAULT_PIPELINE.detectors),
            "score_adaptation": DEFAULT_PIPELINE.score_adaptation}


def chosen_scoring(space: str, detectors: str, score_adaptation: str) -> dict:
    """The scoring the options name, the shipped one where they are empty."""
    shipped = shipped_scoring()
    return {"space": space or shipped["space"],
            "detectors": detectors.split(",") if detectors else shipped["detectors"],
            "score_adaptation": score_adaptation or shipped["score_adaptation"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.archive_path",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="folder-format dataset (its test split: the unseen cameras)")
    parser.add_argument("--model", type=Path, required=True, help="encoder .onnx file")
    parser.add_argument("--shares", default="0.05,0.1",
                        help="new content's share of each camera's images")
    parser.add_argument("--burst", type=int, default=5, help="frames of one burst")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--space", default="", help="space step (default: the shipped one)")
    parser.add_argument("--detectors", default="",
                        help="comma-separated detectors (default: the shipped ones)")
    parser.add_argument("--score-adaptation", default="",
                        help="score adaptation (default: the shipped one)")
    parser.add_argument("--out", type=Path, default=OUT, help="JSON lines appended here")
    args = parser.parse_args(argv)
    scoring = chosen_scoring(args.space, args.detectors, args.score_adaptation)
    results = {}
    with tempfile.TemporaryDirectory(prefix="envad-archive-") as tmp:
        root = Path(tmp)
        reference = build_normals(args.data, root / "reference", "val")
        clean = build_normals(args.data, root / "clean", "train")
        for share in (float(s) for s in args.shares.split(",")):
            archive = build_archive(args.data, root / f"archive-{share}", share, args.burst,
                                    args.seed)
            row = {name: scan_auc(archive, args.model, ref, root / f"work-{share}-{name}",
                                  scoring)
                   for name, ref in (("archive", None), ("reference", reference),
                                     ("clean", clean))}
            results[str(share)] = row
            print(f"new content {share:.0%} in bursts of {args.burst}: "
                  + ", ".join(f"{name} {v['roc_auc']:.3f}" for name, v in row.items())
                  + f"; archive - clean {row['archive']['roc_auc'] - row['clean']['roc_auc']:+.3f}"
                  f", reference - clean "
                  f"{row['reference']['roc_auc'] - row['clean']['roc_auc']:+.3f}",
                  flush=True)
    record = {"benchmark": "archive_path", "data": str(args.data), "model": args.model.name,
              "burst": args.burst, "seed": args.seed, "scoring": scoring,
              "results": results, "machine": machine()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as handle:
        handle.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
