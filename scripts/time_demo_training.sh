#!/usr/bin/env bash
# The demo's training stage alone, timed: the shipped pipeline (envad.pipeline.
# DEFAULT_PIPELINE) at seed 0 and 32 px on DATA, on DEVICE (default auto: the GPU when
# torch sees one), into a fresh run directory. Prints each epoch's log line, the wall
# time to the exported encoder, the device the run resolved to, its phase seconds and its
# last epoch. How docs/client.md's GPU figure was measured (on the lent machine envad and
# its wheels were installed into PYTHONPATH and PYTHON was its python3).
#
#   scripts/time_demo_training.sh [DATA] [DEVICE]
set -euo pipefail
DATA=${1:-var/demo/photodigits}
DEVICE=${2:-auto}
PYTHON=${PYTHON:-.venv/bin/python}
OUT=$(mktemp -d)/run
trap 'rm -rf "$(dirname "$OUT")"' EXIT
PYTHONUNBUFFERED=1 "$PYTHON" - "$DATA" "$DEVICE" "$OUT" <<'PY'
import json, logging, sys, time
from pathlib import Path

start = time.time()
logging.basicConfig(level=logging.INFO, format="%(relativeCreated)8.0f ms %(message)s")
from envad.pipeline import DEFAULT_PIPELINE
from envad.training.run import TrainConfig, train

data, device, out = sys.argv[1:4]
config = TrainConfig.for_pipeline(DEFAULT_PIPELINE, data=data, out=Path(out), size=32,
                                  seed=0, device=device)
run_dir = train(config, progress=False)
print("wall s", round(time.time() - start, 1))
run = json.loads((run_dir / "run.json").read_text())
print("device", run["config"]["device"], "phases", json.dumps(run["phase_seconds"]))
print("last epoch", json.dumps(run["epochs"][-1]))
PY
