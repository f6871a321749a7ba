"""Session fixtures built once for the whole test run, not once per pytest-xdist worker.

`make test` hands each test file to one of several workers, and a session fixture is a
session of its worker: a costly one that files on two workers use (a trained run, a
smoke evaluation) would be built twice. `built_once` builds it in the run's base folder,
shared by its workers, under a file lock; the other workers wait for it and read it.
What it builds is read, never changed, by the tests: a test that changes it copies it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's folder that every worker sees (a worker's base folder is inside it);
    without workers, the run's own base folder."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], object]) -> Path:
    """ROOT/NAME, built by `build(ROOT/NAME)` in the first worker that asks for it. A
    build that failed leaves no folder behind: the next worker that asks builds again
    (and fails as the first did, each with its own traceback)."""
    root = shared_root(tmp_path_factory)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)       # released when the file is closed
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder
