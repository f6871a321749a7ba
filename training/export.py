"""Export a run's encoder to one ONNX file in envad's model format (docs/model-format.md).

The graph takes `images` uint8 [N,S,S,3] and returns `embedding` float32 [N,512]: the
cast, /255, NHWC->NCHW transpose and mean/std normalisation are its first nodes, the
batch axis is dynamic, metadata_props describe the model. Export fails unless ONNX
Runtime (CPU) reproduces the torch encoder on real images to within 1e-4 of the
embedding's scale (its largest absolute value, counted as at least 1: float32 rounding
grows with the values, and a large-lr run's features reach the hundreds).
"""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx
import onnxruntime as ort
import torch

from envad.errors import FailedPrecondition, Internal
from envad.training import checkpoint as ckpt
from envad.training.algorithms import Algorithm
from envad.training.data import load_dataset
from envad.training.models import Uint8Encoder
from envad.training.run_files import read_run

OPSET = 17
PARITY_TOLERANCE = 1e-4
FORMAT_VERSION = "1"


@dataclass(frozen=True)
class ExportReport:
    """Where the file went, how close ONNX Runtime came to torch, and the model id."""

    path: Path
    max_abs_diff: float
    model_id: str
    #: the torch embedding's largest absolute value on the parity images
    scale: float = 1.0

    @property
    def tolerance(self) -> float:
        return parity_tolerance(self.scale)


def parity_tolerance(scale: float) -> float:
    """The largest torch/ONNX Runtime difference accepted for embeddings of `scale`."""
    return PARITY_TOLERANCE * max(1.0, float(scale))


def default_model_id(algorithm: str, dataset: str, size: int, epochs: int, seed: int) -> str:
    raw = f"{algorithm}-{dataset}-{size}px-e{epochs}-s{seed}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-")


def export_onnx(run_dir: str | Path, out_path: str | Path, *,
                parity_images: np.ndarray | None = None,
                model_id: str | None = None) -> ExportReport:
    """Export the newest checkpoint of `run_dir` to `out_path`; check parity.

    parity_images: uint8 [N,S,S,3] real images for the check; by default up to 32
    images of the run's dataset (val split first), decoded like the server does.
    """
    run_dir = Path(run_dir)
    last = ckpt.latest_checkpoint(run_dir)
    if last is None:
        raise FailedPrecondition(f"{run_dir} has no checkpoint to export (train first)")
    payload = ckpt.load_checkpoint(last)
    algorithm = ckpt.build_algorithm(payload)
    if parity_images is None:
        parity_images = _parity_images(run_dir, int(payload["meta"]["input_size"]))
    return export_algorithm(algorithm, payload["meta"], payload["epoch"], out_path,
                            parity_images=parity_images, model_id=model_id)


def export_algorithm(algorithm: Algorithm, meta: dict, epoch: int, out_path: str | Path, *,
                     parity_images: np.ndarray, model_id: str | None = None) -> ExportReport:
    """Export `algorithm`'s encoder (as trained for `epoch` epochs; `meta` as its
    checkpoints hold it) to `out_path`; check parity on `parity_images`. A training run
    exports the algorithm it holds, `export_onnx` one rebuilt from a checkpoint: both
    trace a CPU copy of the encoder in eval mode, in the contiguous layout a checkpoint
    loads into, and leave `algorithm` as it was."""
    out_path = Path(out_path)
    size = int(meta["input_size"])
    model_id = model_id or default_model_id(algorithm.name, meta["dataset"], size,
                                            int(meta["epochs"]), int(meta["seed"]))
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", model_id):
        raise ValueError(f"model id {model_id!r} may hold only letters, digits, - _ .")

    encoder = copy.deepcopy(algorithm.encoder).cpu().to(memory_format=torch.contiguous_format)
    graph = Uint8Encoder(encoder).eval()
    # the TorchScript exporter writes to any binary file object (its annotation names
    # paths only): the model stays in memory until it has passed its checks
    traced = io.BytesIO()
    with warnings.catch_warnings():
        # the TorchScript exporter is deprecated in favour of the dynamo one, which
        # needs onnxscript; this one works offline with torch alone
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, (torch.zeros(2, size, size, 3, dtype=torch.uint8),),
                          cast(Any, traced), input_names=["images"], output_names=["embedding"],
                          dynamic_axes={"images": {0: "N"}, "embedding": {0: "N"}},
                          opset_version=OPSET, dynamo=False)
    props = {
        "envad.format_version": FORMAT_VERSION, "envad.model_id": model_id,
        "envad.input_size": str(size), "envad.embedding_dim": str(encoder.dim),
        "envad.algorithm": algorithm.name,
        "envad.training_envs": json.dumps(list(meta["train_envs"])),
        "envad.dataset": str(meta["dataset"]),
        "envad.created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "envad.mean": json.dumps(list(algorithm.encoder_config.mean)),
        "envad.std": json.dumps(list(algorithm.encoder_config.std)),
        "envad.seed": str(meta["seed"]), "envad.epochs": str(epoch),
    }
    model = _finish_model(traced.getvalue(), props)

    diff, scale = parity(graph, model, parity_images)
    report = ExportReport(out_path, diff, model_id, scale)
    print(f"envad export: {out_path.name}: max |torch - onnxruntime| = {diff:.3g} "
          f"on {len(parity_images)} images (tolerance {report.tolerance:.3g}: "
          f"{PARITY_TOLERANCE:g} x the embedding's scale {scale:.3g})")
    if not diff <= report.tolerance:
        raise Internal(f"ONNX export parity failed: max abs difference {diff:.3g} > "
                       f"{report.tolerance:.3g} ({PARITY_TOLERANCE:g} x the embedding's "
                       f"scale {scale:.3g})")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".tmp")
    try:
        tmp.write_bytes(model)
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return report


def _finish_model(traced: bytes, props: dict[str, str]) -> bytes:
    """The exported model with its metadata_props set, checked by the ONNX checker.

    The props are appended as a serialized ModelProto of their own: protobuf parses
    concatenated messages as one, merged (repeated fields concatenated), so the 45 MB
    model is neither parsed nor serialized again here (0.08 s at 32 px)."""
    entries = [onnx.StringStringEntryProto(key=k, value=v) for k, v in props.items()]
    finished = traced + onnx.ModelProto(metadata_props=entries).SerializeToString()
    onnx.checker.check_model(finished)
    return finished


@torch.no_grad()
def parity(graph: torch.nn.Module, onnx_model: bytes,
           images: np.ndarray) -> tuple[float, float]:
    """Max abs difference between the torch graph and ONNX Runtime (CPU) on `images`,
    and the torch embedding's largest absolute value."""
    images = np.ascontiguousarray(images, dtype=np.uint8)
    if images.ndim != 4 or len(images) == 0:
        raise ValueError("parity images must be a non-empty uint8 [N,S,S,3] batch")
    expected = graph(torch.from_numpy(images)).numpy()
    session = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"])
    (got,) = session.run(["embedding"], {"images": images})
    return float(np.abs(got - expected).max()), float(np.abs(expected).max())


def _parity_images(run_dir: Path, size: int, count: int = 32) -> np.ndarray:
    """Real images from the run's dataset: val split first, then test, then train."""
    dataset = load_dataset(read_run(run_dir)["config"]["data"])
    chosen = np.concatenate([dataset.indices(split) for split in ("val", "test", "train")])
    return dataset.images(chosen[:count], size)
