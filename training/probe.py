"""What an encoder's embedding holds: the content, or the camera.

An encoder that stays true to content should tell classes apart and cameras not. For
each ONNX encoder: the k-NN accuracy (cosine, k = 10, the metric of `val_knn_acc`) of
the class label and of the camera, for the training cameras' `val` normals voting among
a seeded sample of their `train` normals. Reads training cameras only. Chance is one
over the number of classes (cameras) of the sample.

    python -m envad.training.probe --data DIR --encoder runs/a/encoder.onnx \
        --encoder runs/b/encoder.onnx [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from envad.errors import InvalidInput
from envad.server.encoder import OnnxEncoder
from envad.training.batches import class_targets
from envad.training.data import load_dataset
from envad.training.evaluate import embed
from envad.training.multienv import MultiEnvDataset
from envad.training.validation import knn_accuracy

#: training images the val images vote among (a seeded sample)
REFERENCE_ROWS = 1000
K = 10


@dataclass(frozen=True)
class Probe:
    encoder: str
    class_knn_acc: float
    camera_knn_acc: float
    classes: int
    cameras: int
    reference_rows: int
    val_rows: int


def _codes(dataset: MultiEnvDataset, indices: np.ndarray, field: str) -> np.ndarray:
    """Index of each record's `field` value among the sorted distinct values."""
    values = [getattr(dataset.records[int(i)], field) for i in indices]
    return class_targets(values, sorted(set(values)))


def probe(dataset: MultiEnvDataset, encoders: list[Path], seed: int = 0,
          reference_rows: int = REFERENCE_ROWS) -> list[Probe]:
    """One `Probe` per encoder, every encoder on the same images."""
    train = dataset.indices("train", normal_only=True)
    val = dataset.indices("val", normal_only=True)
    if not len(train) or not len(val):
        raise InvalidInput(f"{dataset.name}: the probe needs normal images in the train "
                           "and val splits of the training cameras")
    rng = np.random.default_rng([seed, 7])
    reference = np.sort(rng.permutation(train)[:reference_rows])
    both = np.concatenate([reference, val])
    labels, cameras = _codes(dataset, both, "label"), _codes(dataset, both, "env")
    split = len(reference)
    results = []
    for path in encoders:
        embeddings = torch.from_numpy(embed(OnnxEncoder(path), dataset, both))
        ref, query = embeddings[:split], embeddings[split:]
        results.append(Probe(
            encoder=str(path),
            class_knn_acc=knn_accuracy(ref, labels[:split], query, labels[split:], K),
            camera_knn_acc=knn_accuracy(ref, cameras[:split], query, cameras[split:], K),
            classes=len(np.unique(labels)), cameras=len(np.unique(cameras)),
            reference_rows=split, val_rows=len(val)))
    return results


def markdown(results: list[Probe]) -> str:
    lines = ["| encoder | class k-NN acc | camera k-NN acc |", "| --- | --- | --- |"]
    lines += [f"| {r.encoder} | {100 * r.class_knn_acc:.1f} | {100 * r.camera_knn_acc:.1f} |"
              for r in results]
    if results:
        first = results[0]
        lines.append(f"\n{first.val_rows} val images voting among {first.reference_rows} "
                     f"train images (k = {K}); chance {100 / first.classes:.1f} (class), "
                     f"{100 / first.cameras:.1f} (camera).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder-format dataset (or iwildcam:ROOT)")
    parser.add_argument("--encoder", type=Path, action="append", required=True,
                        help="an encoder.onnx (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="reference sample seed")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = probe(load_dataset(args.data), args.encoder, args.seed)
    print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
