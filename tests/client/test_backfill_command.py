"""`envad backfill --json`: stdout carries the JSON summary alone."""

from __future__ import annotations

import pytest

from envad.client.backfill_command import stdout_for_json_only


def test_what_ray_prints_during_a_json_run_goes_to_stderr(capsys):
    """Ray prints its raylet's and workers' messages (such as "A worker died") to the
    driver's stdout, with the function below; during a --json run they reach stderr."""
    worker = pytest.importorskip("ray._private.worker")
    message = {"is_err": False, "pid": "raylet", "ip": "127.0.0.1", "task_name": None,
               "actor_name": None, "job": "01000000",
               "lines": ["A worker died or was killed while executing a task"]}
    with stdout_for_json_only(True):
        worker.print_to_stdstream(message, ignore_prefix=False)
    print('{"inserted": 1}')
    out, err = capsys.readouterr()
    assert out == '{"inserted": 1}\n'
    assert "A worker died" in err
    with stdout_for_json_only(False):        # without --json, nothing is moved
        print("checkpoint line")
    assert capsys.readouterr().out == "checkpoint line\n"
