"""What a server's fixed memory is made of: modules, encoder, a fitted sample, detectors.

`benchmarks.server_scale` fits the server's resident memory as a line over the store's
size: a fixed part and bytes a row. This benchmark takes the fixed part apart, one stage
at a time, each stage's resident memory (VmRSS, split into anonymous pages and pages of
mapped files: libraries and memory-mapped detector files, which the kernel can drop and
read again) measured on a real `envad serve`:

1. modules: a Python process that has imported the server's modules and nothing else;
2. serving an empty store: `envad serve` with its encoder (a 32 px ResNet-18 with random
   weights) loaded, at SERVING;
3. serving `--rows` stored rows (`benchmarks.scale`'s seeded 512-d rows; default the
   server's fit sample cap), at SERVING, before any Fit;
4. the default pipeline fitted on them, the server restarted, `--calls` Score and
   Search calls made (as `benchmarks.server_scale` measures);
5. the paper's eight detectors fitted instead, restarted, the same calls.

    python -m benchmarks.server_memory [--rows 20000] [--calls 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import emit, log
from benchmarks.models import build_resnet18_onnx
from benchmarks.scale import write_store
from benchmarks.server_scale import (
    MODEL_ID,
    SIZE,
    START_TIMEOUT_S,
    measure_calls,
    query_vector,
    server_memory,
)
from benchmarks.serving import camera_jpegs
from envad.client.library import make_channel
from envad.client.server_process import LocalServer
from envad.defaults import FIT_MAX_SAMPLES
from envad.server.detectors.registry import PAPER_DETECTORS
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc

#: what stage 1 imports: the command line and the server, as `envad serve` does
SERVER_MODULES = "import envad.client.cli, envad.server.app"
KEYS = ("VmRSS", "RssAnon", "RssFile")


def modules_memory() -> dict[str, int]:
    """Stage 1, in its own interpreter: the server's modules imported, nothing running."""
    code = (f"{SERVER_MODULES}\nimport json, os\n"
            "from benchmarks.common import process_memory\n"
            "print(json.dumps(process_memory(os.getpid())))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parent.parent)
    return json.loads(done.stdout.strip().splitlines()[-1])


def fitted_memory(server: LocalServer, detectors: Sequence[str], jpeg: bytes, rows: int,
                  calls: int) -> dict[str, int]:
    """Fit `detectors` (none: the default pipeline), restart, make the calls, measure."""
    with make_channel(server.address) as channel:
        pb_grpc.AnomalyServiceStub(channel).Fit(pb.FitRequest(detectors=detectors),
                                                timeout=START_TIMEOUT_S)
    server.stop()
    server.start(timeout=START_TIMEOUT_S)
    with make_channel(server.address) as channel:
        measure_calls(pb_grpc.AnomalyServiceStub(channel), jpeg, query_vector(rows), calls)
    return server_memory(server)


def stages(work: Path, rows: int, calls: int) -> list[tuple[str, int, dict[str, int]]]:
    """(stage, stored rows, memory) for every stage, in order."""
    model = build_resnet18_onnx(SIZE, work / "models" / "encoder.onnx", model_id=MODEL_ID)
    jpeg = camera_jpegs(1, 640, 480)[0]
    out = [("modules", 0, modules_memory())]
    with LocalServer(work / "empty", model.parent) as server:
        out.append(("serving an empty store", 0, server_memory(server)))
    write_store(work / "data" / "lancedb", rows, MODEL_ID)
    server = LocalServer(work / "data", model.parent)
    try:
        server.start(timeout=START_TIMEOUT_S)
        out.append(("serving the rows, no Fit", rows, server_memory(server)))
        out.append(("default pipeline fitted", rows,
                    fitted_memory(server, [], jpeg, rows, calls)))
        out.append(("the paper's eight fitted", rows,
                    fitted_memory(server, PAPER_DETECTORS, jpeg, rows, calls)))
    finally:
        server.stop()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=FIT_MAX_SAMPLES,
                        help="stored rows for stages 3-5 (default: the fit sample cap)")
    parser.add_argument("--calls", type=int, default=20,
                        help="Score and Search calls before stages 4 and 5 are measured")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the stores (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.work, prefix="envad-server-memory-") as tmp:
        measured = stages(Path(tmp), args.rows, args.calls)
    previous = 0
    for order, (stage, rows, memory) in enumerate(measured, start=1):
        log(f"server_memory: {stage}: {memory['VmRSS'] / 2 ** 20:.0f} MiB")
        emit({"benchmark": "server_memory", "order": order, "stage": stage, "rows": rows,
              **{f"{key}_bytes": memory[key] for key in KEYS},
              "added_bytes": memory["VmRSS"] - previous})
        previous = memory["VmRSS"]


if __name__ == "__main__":
    main()
