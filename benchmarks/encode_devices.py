"""Encoding throughput per device: the served ONNX encoder on ONNX Runtime's providers
against the same graph in torch on a GPU, at one input size and batch.

One JSON line per engine: images/s of `embed` on a fixed uint8 batch (the best of
`--rounds` rounds, each at least `--seconds` long), its ratio to ONNX Runtime's CPU
provider measured in the same run, and the largest difference of its embeddings from
the CPU provider's. ONNX Runtime's CUDA provider is measured where this onnxruntime has
one (the `envad[gpu]` install); otherwise its line says so, and torch on `--device`
(float32, channels-last, as `envad train` places the encoder) shows what the GPU
itself does with the graph.

    python -m benchmarks.encode_devices --size 224 --batch 32 --device cuda
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import best_time, emit, log
from benchmarks.models import build_resnet18_onnx


def onnx_runtime_rate(path: Path, accelerator: str, images: np.ndarray, args
                      ) -> tuple[dict, np.ndarray]:
    """images/s of the server's encoder with `accelerator`, and its embeddings."""
    from envad.server.encoder import OnnxEncoder

    encoder = OnnxEncoder(path, accelerator=accelerator)
    seconds = best_time(lambda: encoder.embed(images), repeats=args.rounds,
                        min_seconds=args.seconds)
    record = {"engine": "onnxruntime", "providers": encoder.providers,
              "images_per_s": round(len(images) / seconds, 1)}
    return record, encoder.embed(images)


def torch_rate(size: int, images: np.ndarray, device: str, args) -> tuple[dict, np.ndarray]:
    """images/s of the same graph (same seed, so the same weights) in torch on `device`."""
    import torch

    from benchmarks.train_speed import synchronize
    from envad.training.models import Encoder, EncoderConfig, Uint8Encoder

    torch.manual_seed(0)          # build_resnet18_onnx's seed: the exported weights
    graph = Uint8Encoder(Encoder(EncoderConfig(input_size=size))).eval()
    graph.to(device)
    graph.to(memory_format=torch.channels_last)
    batch = torch.from_numpy(images).to(device)

    def run() -> torch.Tensor:
        with torch.inference_mode():
            out = graph(batch)
        synchronize(device)
        return out

    seconds = best_time(run, repeats=args.rounds, min_seconds=args.seconds)
    record = {"engine": "torch", "providers": [device], "torch": torch.__version__,
              "images_per_s": round(len(images) / seconds, 1)}
    if device.startswith("cuda"):
        record["gpu"] = torch.cuda.get_device_name(device)
    return record, run().float().cpu().numpy()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--device", default="cuda", help="torch's device for its line")
    args = parser.parse_args(argv)

    from envad.server.encoder import choose_providers

    images = np.random.default_rng(0).integers(0, 256, (args.batch, args.size, args.size, 3),
                                               dtype=np.uint8)
    common = {"benchmark": "encode_devices", "size": args.size, "batch": args.batch,
              "rounds": args.rounds}
    with tempfile.TemporaryDirectory() as tmp:
        path = build_resnet18_onnx(args.size, Path(tmp) / "encoder.onnx")
        log("ONNX Runtime, CPU provider")
        reference, reference_out = onnx_runtime_rate(path, "cpu", images, args)
        results = [(reference, reference_out)]
        providers, note = choose_providers("cuda")
        if note:
            log(note)
            emit({**common, "engine": "onnxruntime", "providers": ["CUDAExecutionProvider"],
                  "missing": note})
        else:
            log("ONNX Runtime, CUDA provider")
            results.append(onnx_runtime_rate(path, "cuda", images, args))
        log(f"torch on {args.device}")
        results.append(torch_rate(args.size, images, args.device, args))
    for record, out in results:
        emit({**common, **record,
              "relative_to_onnxruntime_cpu": round(record["images_per_s"]
                                                   / reference["images_per_s"], 2),
              "max_abs_difference": float(np.abs(out - reference_out).max())})


if __name__ == "__main__":
    main()
