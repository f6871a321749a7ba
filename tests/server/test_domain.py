"""The plain records load without the heavy infrastructure (FAISS, LanceDB, gRPC)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("faiss", "lancedb", "grpc", "onnxruntime", "pyarrow")


@pytest.mark.parametrize("module", ["envad.server.domain", "envad.records"])
def test_importing_records_loads_no_infrastructure(module: str) -> None:
    code = (f"import sys, json; import {module}; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    assert json.loads(out) == []
