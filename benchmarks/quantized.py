"""int8 vs float32 encoder: throughput ratio and ROC-AUC change on PhotoDigits.

BENCHMARK.md item 5. Quantises an envad encoder file with ONNX Runtime's dynamic int8
quantisation (weights int8, activations quantised on the fly), then, in one run:
- throughput of both files on the same pre-decoded batch;
- ROC-AUC of the KNN detector and of the ensemble, fitted on the training cameras'
  normal `train` images and scored on the unseen test cameras, for both files.

    python -m benchmarks.quantized --model var/demo/models/encoder.onnx --data var/demo/photodigits
"""

from __future__ import annotations

import argparse
import functools
import tempfile
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from benchmarks.common import best_time, emit, log
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.encoder import OnnxEncoder
from envad.training.data import load_dataset


def quantize(model: Path, out: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(model), str(out), weight_type=QuantType.QInt8)
    return out


def embed_all(encoder: OnnxEncoder, images: np.ndarray, batch: int = 256) -> np.ndarray:
    return np.concatenate([encoder.embed(images[i:i + batch])
                           for i in range(0, len(images), batch)])


def roc_aucs(encoder: OnnxEncoder, train: np.ndarray, test: np.ndarray,
             labels: np.ndarray) -> dict[str, float]:
    bundle = fit_bundle(embed_all(encoder, train), FitSpec(detectors=("KNN", "IsoForest", "PCA")))
    scores = bundle.score(embed_all(encoder, test))
    return {"KNN": roc_auc_score(labels, scores.raw["KNN"]),
            "ensemble": roc_auc_score(labels, scores.ensemble)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="envad encoder (.onnx)")
    parser.add_argument("--data", required=True, help="PhotoDigits (folder-format) directory")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    fp32 = OnnxEncoder(args.model)
    size = fp32.input_size
    dataset = load_dataset(args.data)
    train_idx = dataset.indices(split="train", normal_only=True)
    test_idx = dataset.indices(split="test")
    train = dataset.images(train_idx, size)
    test = dataset.images(test_idx, size)
    labels = np.array([dataset.records[i].is_anomaly for i in test_idx], dtype=int)
    with tempfile.TemporaryDirectory() as tmp:
        log("quantising ...")
        int8 = OnnxEncoder(quantize(args.model, Path(tmp) / "int8.onnx"))
        batch = test[:args.batch]
        rates = {name: len(batch) / best_time(functools.partial(enc.embed, batch), repeats=3,
                                              min_seconds=1.0)
                 for name, enc in (("fp32", fp32), ("int8", int8))}
        log("scoring ...")
        auc = {name: roc_aucs(enc, train, test, labels) for name, enc in
               (("fp32", fp32), ("int8", int8))}
    emit({"benchmark": "quantized", "model": args.model.name, "size": size,
          "fp32_images_per_s": rates["fp32"], "int8_images_per_s": rates["int8"],
          "throughput_ratio_int8_over_fp32": rates["int8"] / rates["fp32"],
          "roc_auc_fp32": auc["fp32"], "roc_auc_int8": auc["int8"],
          "roc_auc_change_knn": auc["int8"]["KNN"] - auc["fp32"]["KNN"],
          "roc_auc_change_ensemble": auc["int8"]["ensemble"] - auc["fp32"]["ensemble"]})


if __name__ == "__main__":
    main()
