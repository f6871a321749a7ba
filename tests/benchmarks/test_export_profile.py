"""benchmarks.export_profile on a small store: the read and encoding alone, then timed
inside a streaming server process while the client receives every row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_export_is_taken_apart():
    done = subprocess.run([sys.executable, "-m", "benchmarks.export_profile", "--rows", "5000",
                           "--rounds", "2"], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["benchmark"] for r in records] == ["export_alone"] + ["export_streamed"] * 2
    assert set(records[0]) >= {"read_s", "encode_s"}
    for streamed in records[1:]:     # the client asserted it parsed all 5,000 rows
        assert streamed["rows"] == 5000
        assert set(streamed) >= {"read_s", "encode_s", "send_s", "span_s", "client_s"}
