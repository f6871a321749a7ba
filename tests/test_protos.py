"""The committed gRPC stubs match what scripts/gen_protos.py generates from the .proto."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ["envad_pb2.py", "envad_pb2.pyi", "envad_pb2_grpc.py"]


def test_committed_stubs_are_fresh(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.generate(tmp_path)
    for name in GENERATED:
        fresh = (tmp_path / "envad" / "v1" / name).read_text()
        committed = (ROOT / "proto" / "envad" / "v1" / name).read_text()
        assert fresh == committed, f"{name} is stale: run `make protos` and commit"
