"""Durability on disk: what the server's atomic saves (bundles, the saved neighbour
index) call to make a written file or a rename survive a power cut."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by path (a directory: its entries, e.g. a rename)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
