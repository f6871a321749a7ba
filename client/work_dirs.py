"""Where the client keeps its work files (backfill checkpoints), whatever directory the
user runs `envad` from.

Under the server's data dir when it is on this machine and writable (the usual case:
`envad serve` and `envad backfill` on one host), so that a job's journal lives with the
store it describes; otherwise under the user's data dir (`$ENVAD_HOME`, else
`$XDG_DATA_HOME/envad`, else `~/.local/share/envad`).
"""

from __future__ import annotations

import os
from pathlib import Path


def user_data_dir() -> Path:
    """The client's own data dir on this machine."""
    if os.environ.get("ENVAD_HOME"):
        return Path(os.environ["ENVAD_HOME"])
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "envad"


def work_dir(server_data_dir: str | Path | None) -> Path:
    """The folder for work files of jobs against a server whose data dir is
    `server_data_dir` (as GetInfo reports it)."""
    if server_data_dir:
        path = Path(server_data_dir)
        if path.is_absolute() and path.is_dir() and os.access(path, os.W_OK | os.X_OK):
            return path
    return user_data_dir()


def checkpoint_dir(server_data_dir: str | Path | None) -> Path:
    """Where backfill checkpoints go by default."""
    return work_dir(server_data_dir) / "checkpoints"
