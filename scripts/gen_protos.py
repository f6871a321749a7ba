"""Generate the Python stubs of proto/envad/v1/envad.proto next to it.

Usage: python scripts/gen_protos.py [--out DIR]

The output path is the import path: proto/envad/v1/envad.proto -> envad.v1.envad_pb2.
Run by `make protos`; tests/test_protos.py regenerates into a temp dir and compares.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
PROTO_FILES = ["envad/v1/envad.proto"]


def generate(out_dir: Path) -> None:
    """Run protoc for every API file, writing _pb2.py, _pb2.pyi and _pb2_grpc.py."""
    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    for proto in PROTO_FILES:
        code = protoc.main([
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(PROTO_ROOT / proto),
        ])
        if code != 0:
            raise SystemExit(f"protoc failed on {proto} (exit {code})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PROTO_ROOT)
    args = parser.parse_args()
    generate(args.out)
    print(f"generated stubs for {len(PROTO_FILES)} file(s) under {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
