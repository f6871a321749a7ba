"""Benchmark encoders: a randomly initialised envad ResNet-18 exported in the model format.

Weights do not change speed, so the benchmarks need no training run; the graph is the
same Uint8Encoder that `envad export` writes (normalisation inside, dynamic batch).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path


def build_resnet18_onnx(size: int, out_path: Path, *, model_id: str | None = None) -> Path:
    """Export ResNet-18 (small stem at <= 64 px) for `size` px input to `out_path`."""
    import onnx
    import torch

    from envad.training.models import Encoder, EncoderConfig, Uint8Encoder

    torch.manual_seed(0)
    config = EncoderConfig(input_size=size)
    graph = Uint8Encoder(Encoder(config)).eval()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(graph, (torch.zeros(2, size, size, 3, dtype=torch.uint8),), str(out_path),
                      input_names=["images"], output_names=["embedding"],
                      dynamic_axes={"images": {0: "N"}, "embedding": {0: "N"}},
                      opset_version=17, dynamo=False)
    model = onnx.load(str(out_path))
    onnx.helper.set_model_props(model, {
        "envad.format_version": "1", "envad.model_id": model_id or f"bench-resnet18-{size}",
        "envad.input_size": str(size), "envad.embedding_dim": "512",
        "envad.algorithm": "random", "envad.training_envs": json.dumps([]),
        "envad.dataset": "none",
        "envad.created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    })
    onnx.save(model, str(out_path))
    return out_path
