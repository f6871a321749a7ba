"""The client's only door into envad.training (torch): train an encoder, fetch its file.

Used by `envad retrain` and the demo; imported lazily so that no other client code path
loads torch.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from envad.pipeline import Pipeline


def train_encoder(dataset: str | Path, out_dir: str | Path, *, algorithm: str = "erm",
                  epochs: int = 5, seed: int = 0, image_size: int = 32,
                  model_id: str | None = None, task: str = "bucket", augment: str = "none",
                  aux: str = "none", hparams: dict | None = None,
                  progress: bool = True, device: str = "auto", workers: int = 1) -> Path:
    """Pretrain an encoder on a folder-format dataset and export it (training's own
    `run_dir/encoder.onnx`); an unfinished run in `out_dir` is resumed. Returns run_dir.
    `device`: cpu, cuda[:N], or auto (the GPU when torch sees one); `workers`: training
    processes (data-parallel)."""
    from envad.training.run import TrainConfig, train  # envad.training: the train extra

    config = TrainConfig(data=str(dataset), algorithm=algorithm, out=Path(out_dir),
                         size=image_size, epochs=epochs, seed=seed, model_id=model_id,
                         task=task, augment=augment, aux=aux, hparams=dict(hparams or {}),
                         device=device, workers=workers)
    return Path(train(config, progress=progress, resume=True))


def generate_photodigits(out: str | Path, *, size: int = 32, seed: int = 0) -> Path:
    """Write PhotoDigits (training/photodigits.py, deterministic for a seed) to `out`."""
    from envad.training.photodigits import generate  # envad.training: the train extra

    generate(Path(out), size=size, seed=seed, progress=False)
    return Path(out)


def load_folder_dataset(data: str | Path):
    """A folder-format dataset, read with training's reader (envad.training.data)."""
    from envad.training.data import load_dataset  # envad.training: the train extra

    return load_dataset(data)


def set_aside_stale_run(run_dir: str | Path, algorithm: str,
                        hparams: dict | None = None) -> tuple[Path, str] | None:
    """When `run_dir` holds a run trained with other hyperparameters than `algorithm`'s
    resolve to now (a default moved since, as the sweeps move them), move it to
    `RUN.stale-N` (kept, never reused) and return (where, what changed: "lr 0.001 (now
    0.003)"); None when there is nothing there or it is current. For a directory the
    caller owns, like the demo's runs: training would otherwise refuse the stale run,
    rightly, and stop."""
    from envad.training.run import stale_hparams  # envad.training: the train extra

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    changed = stale_hparams(run_dir, algorithm, dict(hparams or {}))
    if not changed:
        return None
    n = 1
    while (target := run_dir.with_name(f"{run_dir.name}.stale-{n}")).exists():
        n += 1
    os.replace(run_dir, target)
    return target, changed


def export_encoder(run_dir: str | Path, out_path: str | Path) -> Path:
    """Copy a finished run's exported encoder (parity-checked by training) to `out_path`,
    atomically."""
    from envad.training.run_files import ENCODER_FILE  # envad.training: the train extra

    source = Path(run_dir) / ENCODER_FILE
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing: the training run did not finish")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".partial")
    shutil.copyfile(source, tmp)
    os.replace(tmp, out_path)
    return out_path


def select_pipeline(dataset: str | Path, out: str | Path, *, candidates: int, folds: int,
                    epochs: int | None = None, seed: int = 0, image_size: int = 32,
                    device: str = "cpu", progress: bool = True,
                    spaces: tuple[str, ...] | None = None,
                    detectors: tuple[str, ...] | None = None) -> Pipeline:
    """`envad select` on the training cameras of `dataset` (leave-one-camera-out folds,
    test cameras never read), with a budget: the first `candidates` of the built-in
    candidates (training/selection.py's order: the paper's recipe, the shipped recipe at
    5 epochs, GroupDRO, the shipped recipe at 10 epochs, ...), each trained once per fold,
    at most `epochs` epochs when given, in the space steps `spaces` (None: the
    selection's SPACE_CANDIDATES), choosing among `detectors` (None: every registered
    one). Writes OUT/selection.json (resumed when there) and returns the chosen
    Pipeline."""
    from envad.training.selection import (  # envad.training: the train extra
        DEFAULT_CANDIDATES,
        SPACE_CANDIDATES,
        run_selection,
    )

    if candidates < 1 or folds < 2:
        raise ValueError(f"a selection needs at least 1 candidate and 2 folds, got "
                         f"{candidates} and {folds}")
    chosen = dict(list(DEFAULT_CANDIDATES.items())[:candidates])
    if epochs:
        chosen = {name: replace(c, epochs=min(c.epochs, epochs)) for name, c in chosen.items()}
    summary = run_selection(str(dataset), chosen, Path(out), n_folds=folds, seed=seed,
                            size=image_size, device=device, progress=progress,
                            spaces=spaces or SPACE_CANDIDATES, detectors=detectors)
    return Pipeline.from_json(summary["chosen"])

