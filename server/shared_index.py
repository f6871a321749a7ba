"""The saved neighbour index on object storage (a data dir that is a URI).

The writer uploads each save of its index (index_files.py) under
`<data URI>/index/<model>/`, data files first and the manifest last, then deletes the
files of earlier saves; a replica opening a model on an empty cache, or one whose saved
index covers fewer rows, downloads it first. A reader then starts from the saved index
and reads only the rows stored after it, instead of every vector of the store and a
k-means training (a flat index, which needs no training, is built from the store). What is
downloaded is checked as any saved index is at load (sizes, CRC-32, spot checks against
the store): a damaged or half-replaced copy is a rebuild, never a wrong answer.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from envad.server.index_files import MANIFEST
from envad.server.remote_dir import RemoteDir

log = logging.getLogger(__name__)


def _listed(manifest_text: bytes) -> list[str]:
    return sorted(json.loads(manifest_text)["files"])


def upload_saved_index(local: Path, remote: RemoteDir) -> bool:
    """Upload the save in `local` unless the remote holds it already; True if uploaded."""
    manifest_path = Path(local) / MANIFEST
    if not manifest_path.is_file():
        return False
    text = manifest_path.read_bytes()
    if remote.read_bytes(MANIFEST) == text:
        return False
    names = _listed(text)
    for name in names:
        remote.upload(Path(local) / name, name)
    remote.write_bytes(MANIFEST, text)
    for name in remote.files():
        if name != MANIFEST and name not in names:
            remote.delete(name)
    return True


def _rows(manifest_text: bytes | None) -> int:
    try:
        return int(json.loads(manifest_text or b"")["rows"])
    except (ValueError, KeyError, TypeError):
        return -1


def _kind(manifest_text: bytes) -> str:
    try:
        return str(json.loads(manifest_text)["kind"])
    except (ValueError, KeyError, TypeError):
        return ""


def download_saved_index(remote: RemoteDir, local: Path) -> bool:
    """Download the remote save into `local` when it covers more rows than the save
    there (or there is none) and its lists were trained (IVF kinds); True if downloaded.
    A flat index is built from the table's vectors faster than it downloads (4x at
    100,000 rows on an S3 emulator: benchmarks/scale_out.py), so it is not fetched.
    A save replaced on the remote while it was being read (its files deleted) is tried
    once more, then left to a rebuild."""
    local = Path(local)
    for _ in range(2):
        text = remote.read_bytes(MANIFEST)
        if text is None:
            return False
        held = (local / MANIFEST).read_bytes() if (local / MANIFEST).is_file() else None
        if held == text or _rows(held) >= _rows(text) or _kind(text) == "flat":
            return False
        if all(remote.download(name, local / name) for name in _listed(text)):
            staging = local / f"{MANIFEST}.pulled"
            staging.write_bytes(text)
            staging.replace(local / MANIFEST)
            log.info("saved index of %d rows downloaded from %s", _rows(text), remote.uri)
            return True
    log.warning("the saved index at %s changed while it was downloaded: built from the "
                "store instead", remote.uri)
    return False
