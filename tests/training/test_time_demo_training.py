"""scripts/time_demo_training.sh: the shipped pipeline's training stage, timed, on the
device it names (30 epochs even on a tiny dataset, so marked slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_training_stage_is_timed_on_the_resolved_device(tiny_photodigits):
    from envad.devices import resolve_device
    from envad.pipeline import DEFAULT_PIPELINE

    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "time_demo_training.sh"), str(tiny_photodigits),
         "auto"], capture_output=True, text=True, timeout=900,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line.split(" ", 1)[0]: line for line in done.stdout.splitlines()}
    assert float(lines["wall"].split()[-1]) > 0
    assert lines["device"].startswith(f"device {resolve_device('auto')} phases ")
    last = json.loads(lines["last"].split(" ", 2)[2])
    assert last["epoch"] == DEFAULT_PIPELINE.epochs
