"""fsync by path: files and directories; a missing path is an error, not a no-op."""

from __future__ import annotations

import pytest

from envad.server.durable import fsync_path


def test_files_and_directories_are_synced_and_a_missing_path_raises(tmp_path):
    written = tmp_path / "a.bin"
    written.write_bytes(b"x" * 10)
    fsync_path(written)
    fsync_path(tmp_path)
    assert written.read_bytes() == b"x" * 10
    with pytest.raises(FileNotFoundError):
        fsync_path(tmp_path / "missing")
