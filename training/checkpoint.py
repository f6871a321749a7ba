"""Checkpoints: constructor arguments + state_dicts, plain data only (no pickled modules).

Loaded with `torch.load(..., weights_only=True)`; the algorithm is rebuilt from its
registry name and constructor arguments, then its state is loaded.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from envad.training.algorithms import Algorithm, get

FORMAT = 1
_NAME = re.compile(r"checkpoint-epoch(\d{3,})\.pt$")


def checkpoint_path(run_dir: Path, epoch: int) -> Path:
    return Path(run_dir) / f"checkpoint-epoch{epoch:03d}.pt"


def save_checkpoint(path: Path, algorithm: Algorithm, *, epoch: int, meta: dict,
                    resumable: bool = True) -> Path:
    """Write atomically (temp file + rename): a crash never leaves a partial checkpoint.
    `resumable=False` leaves out the optimizer state (under Adam twice the weights'
    size), which only a run that trains further reads: a run's last epoch."""
    state = algorithm.training_state()
    if not resumable:
        state.pop("optimizer", None)
    payload = {"format": FORMAT, "algorithm": algorithm.name,
               "args": algorithm.constructor_args(), "epoch": int(epoch), "meta": meta,
               "state": _to_cpu(state)}
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: Path) -> dict:
    """The checkpoint's plain-data payload (tensors on CPU)."""
    payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    if payload.get("format") != FORMAT:
        raise ValueError(f"{path}: unsupported checkpoint format {payload.get('format')}")
    return payload


def build_algorithm(payload: dict) -> Algorithm:
    """Rebuild the algorithm from a checkpoint payload (weights files are not re-read)."""
    args = dict(payload["args"])
    cls = get(payload["algorithm"])
    algorithm = cls(args.pop("encoder"), args.pop("hparams"), load_weights=False, **args)
    algorithm.load_training_state(payload["state"])
    return algorithm


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(epoch, path) of the complete checkpoints in a run dir, oldest first."""
    found = []
    for path in Path(run_dir).glob("checkpoint-epoch*.pt"):
        match = _NAME.search(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1][1] if found else None


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints (keep <= 0 keeps all)."""
    if keep <= 0:
        return
    for _, path in checkpoints(run_dir)[:-keep]:
        path.unlink(missing_ok=True)


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value
