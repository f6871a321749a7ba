"""The client's only door into envad.training (torch): train an encoder, export it.

Used by `envad retrain` and the demo; imported lazily so that no other client code path
loads torch.
"""

from __future__ import annotations

from pathlib import Path


def train_encoder(dataset: str | Path, out_dir: str | Path, *, algorithm: str = "erm",
                  epochs: int = 5, seed: int = 0, image_size: int = 32) -> Path:
    """Pretrain an encoder on a folder-format dataset; returns the run directory."""
    from envad.training.run import TrainConfig, train

    config = TrainConfig(data=str(dataset), out_dir=str(out_dir), algorithm=algorithm,
                         epochs=epochs, seed=seed, image_size=image_size)
    return Path(train(config))


def export_encoder(run_dir: str | Path, out_path: str | Path,
                   model_id: str | None = None) -> Path:
    """Export a training run's encoder to an envad ONNX file."""
    from envad.training.export import export_onnx

    if model_id:
        export_onnx(Path(run_dir), Path(out_path), model_id=model_id)
    else:
        export_onnx(Path(run_dir), Path(out_path))
    return Path(out_path)
