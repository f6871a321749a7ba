"""The backfill checkpoint journal: durable, crash-tolerant, resumable, exclusive."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envad.client.checkpoint import Checkpoint, CheckpointMismatch, Outcome
from envad.errors import InvalidInput

HEADER = {"source": {"format": "folder", "path": "/data"}, "model_id": "m1"}


def test_records_survive_reopen_and_latest_outcome_wins(tmp_path) -> None:
    path = tmp_path / "ck.jsonl"
    with Checkpoint(path, HEADER, resume=False) as ck:
        ck.record([Outcome("a", "ok", id="ida"), Outcome("b", "failed", code="INVALID_ARGUMENT",
                                                       reason="bad image")])
        ck.record([Outcome("c", "skipped", reason="video")])
        assert ck.is_done("a") and not ck.is_done("b") and ck.is_done("c")
    with Checkpoint(path, HEADER, resume=True) as ck:
        assert ck.is_done("a") and not ck.is_done("b")
        ck.record([Outcome("b", "ok", id="idb")])
        assert ck.is_done("b")
        outcomes = {o.key: o for o in ck.outcomes()}
    assert {k: o.status for k, o in outcomes.items()} == {"a": "ok", "b": "ok", "c": "skipped"}
    assert outcomes["a"].id == "ida"
    assert outcomes["c"].reason == "video"


def test_fresh_run_refuses_existing_progress(tmp_path) -> None:
    path = tmp_path / "ck.jsonl"
    with Checkpoint(path, HEADER, resume=False) as ck:
        ck.record([Outcome("a", "ok")])
    with pytest.raises(InvalidInput, match="--resume"):
        Checkpoint(path, HEADER, resume=False)


def test_resume_refuses_another_job(tmp_path) -> None:
    path = tmp_path / "ck.jsonl"
    with Checkpoint(path, HEADER, resume=False) as ck:
        ck.record([Outcome("a", "ok")])
    with pytest.raises(CheckpointMismatch, match="model_id"):
        Checkpoint(path, {**HEADER, "model_id": "m2"}, resume=True)


def test_torn_last_line_is_dropped(tmp_path) -> None:
    path = tmp_path / "ck.jsonl"
    with Checkpoint(path, HEADER, resume=False) as ck:
        ck.record([Outcome("a", "ok"), Outcome("b", "ok")])
    with path.open("ab") as f:
        f.write(b'{"k":"c","s":"o')  # a crash in the middle of a write
    with Checkpoint(path, HEADER, resume=True) as ck:
        assert ck.is_done("a") and ck.is_done("b") and not ck.is_done("c")
        ck.record([Outcome("c", "ok")])
    lines = path.read_text().splitlines()
    assert [json.loads(x).get("k") for x in lines[1:]] == ["a", "b", "c"]


def test_corrupt_middle_line_is_an_error(tmp_path) -> None:
    path = tmp_path / "ck.jsonl"
    with Checkpoint(path, HEADER, resume=False) as ck:
        ck.record([Outcome("a", "ok")])
    path.write_text(path.read_text() + "garbage\n" + '{"k":"b","s":"ok"}\n')
    with pytest.raises(InvalidInput, match="corrupt"):
        Checkpoint(path, HEADER, resume=True)


def test_second_writer_is_locked_out(tmp_path) -> None:
    path = tmp_path / "ck.jsonl"
    with Checkpoint(path, HEADER, resume=False):
        code = (
            "import sys\n"
            "from envad.client.checkpoint import Checkpoint\n"
            "from envad.errors import InvalidInput\n"
            f"try:\n    Checkpoint({str(path)!r}, {HEADER!r}, resume=True)\n"
            "except InvalidInput as e:\n    print(e); sys.exit(3)\n"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert result.returncode == 3, result.stderr
        assert "in use" in result.stdout


def test_killed_writer_loses_only_the_unrecorded(tmp_path) -> None:
    """A process killed hard after recording keeps every recorded outcome."""
    path = tmp_path / "ck.jsonl"
    code = (
        "import os, signal\n"
        "from envad.client.checkpoint import Checkpoint, Outcome\n"
        f"ck = Checkpoint({str(path)!r}, {HEADER!r}, resume=False)\n"
        "for n in range(50):\n"
        "    ck.record([Outcome(f'k{n}', 'ok')])\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", code])
    with Checkpoint(path, HEADER, resume=True) as ck:
        assert all(ck.is_done(f"k{n}") for n in range(50))
        assert ck.count("ok") == 50
