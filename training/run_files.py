"""The files of a training run dir and how `run.json` is read and written.

A run dir holds `run.json` (config, per-epoch metrics, status), its checkpoints,
`curves.png` and, when done, `encoder.onnx`. Training writes it; export, evaluation,
pipeline selection, the CLI and the client's training bridge read it. The names live
here, apart from `run.py`, so that readers import neither the trainer nor torch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

RUN_FILE = "run.json"
ENCODER_FILE = "encoder.onnx"
CURVES_FILE = "curves.png"


def read_run(run_dir: str | Path) -> dict:
    """The run.json of a run dir (FileNotFoundError if there is none)."""
    run = read_run_if_any(Path(run_dir))
    if run is None:
        raise FileNotFoundError(f"{run_dir} holds no {RUN_FILE}: not an envad training run")
    return run


def read_run_if_any(run_dir: Path) -> dict | None:
    """The run.json of a run dir, or None when the dir holds none (a fresh run)."""
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


VAL_METRICS = ("val_knn_acc", "val_acc")    # what each epoch records on the val split


def last_val_metrics(run: dict) -> dict[str, float]:
    """The val-split metrics of a run's last epoch (those it recorded; none before one)."""
    last = run["epochs"][-1] if run["epochs"] else {}
    return {k: last[k] for k in VAL_METRICS if last.get(k) is not None}


def training_seconds(run: dict) -> float:
    """Seconds a run spent in its training epochs (fixed costs not counted)."""
    return sum(e.get("seconds", 0.0) for e in run["epochs"])


def write_text_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` whole or not at all (a crash leaves the old or the new
    file, never half): written beside it as `NAME.tmp`, then renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_run(run_dir: Path, run: dict) -> None:
    """Replace run.json atomically (a crash leaves the old or the new one, never half)."""
    write_text_atomically(Path(run_dir) / RUN_FILE, json.dumps(run, indent=1))
