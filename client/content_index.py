"""Images already stored under another id, found by the sha256 of their bytes.

The store is idempotent by id, but one image reaches it under different ids from
different sources (a Camtrap DP package names it deploymentID/mediaID, a plain image
tree by its sha256, a folder-format dataset by its `id` column), and would then be
stored twice, in two environments. A backfill loads the stored rows' content hashes
once (metadata only, through Export) and checks every image it reads against them and
against the images sent before it in the same run.

Memory: one entry per stored row (16 bytes of the hash and the row's id), about 150 MB
per million rows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

#: The skip reason of an image whose content is stored under another id.
DUPLICATE_REASON = "same content as an image already stored under another id"
_KEY_BYTES = 16


@dataclass(frozen=True)
class StoredCopy:
    """The row that already holds an image's content."""

    id: str
    env: str


class ContentIndex:
    """sha256 of each stored (or claimed) image -> the row holding it; thread-safe."""

    def __init__(self) -> None:
        self._rows: dict[bytes, StoredCopy] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    @classmethod
    def from_server(cls, client) -> ContentIndex:
        """The content hashes of every row stored for the server's active encoder."""
        index = cls()
        for batch in client.export(with_vectors=False):
            columns = batch.to_pydict()
            for sha, row_id, env in zip(columns["sha256"], columns["id"], columns["env"],
                                        strict=True):
                if sha:
                    index._rows.setdefault(_key(sha), StoredCopy(row_id, env or ""))
        return index

    def claim(self, sha256_hex: str, row_id: str, env: str) -> StoredCopy | None:
        """The row that holds this content under another id; None when there is none,
        and then the content is recorded as `row_id`'s (the caller stores it)."""
        key = _key(sha256_hex)
        with self._lock:
            held = self._rows.get(key)
            if held is not None and held.id != row_id:
                return held
            self._rows[key] = StoredCopy(row_id, env)
            return None


def _key(sha256_hex: str) -> bytes:
    return bytes.fromhex(sha256_hex)[:_KEY_BYTES]
