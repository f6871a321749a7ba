"""The client's door into training: a stale cached run is set aside, a current one kept."""

from __future__ import annotations

import json

from envad.client.training_bridge import set_aside_stale_run
from envad.training.run import resolved_hparams
from envad.training.run_files import write_run


def _run(path, hparams: dict) -> None:
    path.mkdir(parents=True)
    write_run(path, {"config": {"seed": 0}, "status": "done", "hparams": hparams,
                     "epochs": []})


def test_a_run_trained_before_a_default_moved_is_set_aside(tmp_path) -> None:
    now = resolved_hparams("erm", {"schedule": "cosine"})
    earlier = {**now, "lr": now["lr"] / 3}
    run_dir = tmp_path / "erm-s0"
    _run(run_dir, earlier)
    moved = set_aside_stale_run(run_dir, "erm", {"schedule": "cosine"})
    assert moved is not None
    where, changed = moved
    assert where == tmp_path / "erm-s0.stale-1" and not run_dir.exists()
    assert json.loads((where / "run.json").read_text())["hparams"] == earlier
    assert changed == f"lr {earlier['lr']!r} (now {now['lr']!r})"
    _run(run_dir, earlier)                       # stale again: the next free name
    again = set_aside_stale_run(run_dir, "erm", {"schedule": "cosine"})
    assert again is not None and again[0] == tmp_path / "erm-s0.stale-2"


def test_a_current_run_or_no_run_is_left_alone(tmp_path) -> None:
    run_dir = tmp_path / "erm-s0"
    assert set_aside_stale_run(run_dir, "erm", {}) is None
    _run(run_dir, resolved_hparams("erm", {"schedule": "cosine"}))
    assert set_aside_stale_run(run_dir, "erm", {"schedule": "cosine"}) is None
    assert (run_dir / "run.json").is_file()
    # asked for with another value of a hyperparameter it records, it is stale
    assert set_aside_stale_run(run_dir, "erm", {"schedule": "cosine", "weight_decay": 1e-4}
                               ) is not None
