"""benchmarks.unauthenticated_bodies, small: both refusals answer every unauthenticated
Score UNAUTHENTICATED and report the server's memory around the burst."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_two_small_bodies_are_refused_by_both_refusals():
    done = subprocess.run([sys.executable, "-m", "benchmarks.unauthenticated_bodies",
                           "--clients", "2", "--mb", "2"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["refusal"] for r in records] == ["current", "receive_then_refuse"]
    for record in records:
        assert record["statuses"] == {"UNAUTHENTICATED": 2}, record
