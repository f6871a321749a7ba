"""The elapsed-time line of a long call (client/progress.py)."""

from __future__ import annotations

import time

import pytest

from envad.client.progress import wait_with_progress


def slow_answer() -> int:
    time.sleep(0.7)
    return 42


def test_the_result_comes_back_and_the_line_says_done(capsys) -> None:
    assert wait_with_progress(slow_answer, "fit") == 42
    err = capsys.readouterr().err
    assert "fit: " in err and "elapsed" in err and "done" in err


def test_the_calls_exception_is_raised_in_the_caller(capsys) -> None:
    def fail():
        raise ValueError("bad filter")

    with pytest.raises(ValueError, match="bad filter"):
        wait_with_progress(fail, "fit")
    assert "failed" in capsys.readouterr().err


def test_disabled_runs_inline_and_prints_nothing(capsys) -> None:
    assert wait_with_progress(lambda: "x", "fit", enabled=False) == "x"
    assert capsys.readouterr().err == ""
