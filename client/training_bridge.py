"""The client's only door into envad.training (torch): train an encoder, fetch its file.

Used by `envad retrain` and the demo; imported lazily so that no other client code path
loads torch.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def train_encoder(dataset: str | Path, out_dir: str | Path, *, algorithm: str = "erm",
                  epochs: int = 5, seed: int = 0, image_size: int = 32,
                  model_id: str | None = None, task: str = "bucket", augment: str = "none",
                  aux: str = "none", hparams: dict | None = None,
                  progress: bool = True) -> Path:
    """Pretrain an encoder on a folder-format dataset and export it (training's own
    `run_dir/encoder.onnx`); an unfinished run in `out_dir` is resumed. Returns run_dir."""
    from envad.training.run import TrainConfig, train

    config = TrainConfig(data=str(dataset), algorithm=algorithm, out=Path(out_dir),
                         size=image_size, epochs=epochs, seed=seed, model_id=model_id,
                         task=task, augment=augment, aux=aux, hparams=dict(hparams or {}))
    return Path(train(config, progress=progress, resume=True))


def export_encoder(run_dir: str | Path, out_path: str | Path) -> Path:
    """Copy a finished run's exported encoder (parity-checked by training) to `out_path`,
    atomically."""
    from envad.training.run_files import ENCODER_FILE

    source = Path(run_dir) / ENCODER_FILE
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing: the training run did not finish")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".partial")
    shutil.copyfile(source, tmp)
    os.replace(tmp, out_path)
    return out_path
