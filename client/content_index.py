"""Images already stored under another id, found by the sha256 of their bytes.

The store is idempotent by id, but one image reaches it under different ids from
different sources (a Camtrap DP package names it deploymentID/mediaID, a plain image
tree by its sha256, a folder-format dataset by its `id` column), and would then be
stored twice, in two environments. A backfill loads the stored rows' content hashes
once (metadata only, through Export) and checks every image it reads against them and
against the images sent before it in the same run.

Memory: one dict entry per stored row, keyed by 16 bytes of the hash; the row's id is
kept only when it is not the hash itself (an image tree's rows cost nothing more).
Measured with `python -m benchmarks.content_index`: 91 MB per million rows stored under
their hash, 154 MB per million rows with short named ids (docs/benchmarks.md).
"""

from __future__ import annotations

import threading

#: The skip reason of an image whose content is stored under another id.
DUPLICATE_REASON = "same content as an image already stored under another id"
_KEY_BYTES = 16


class ContentIndex:
    """sha256 of each stored (or claimed) image -> the id of the row holding it;
    thread-safe."""

    def __init__(self) -> None:
        self._rows: dict[bytes, str | None] = {}   # None: the id is the sha256 itself
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, sha256_hex: str, row_id: str) -> None:
        """Record that the row `row_id` holds this content (the first row wins)."""
        self._rows.setdefault(_key(sha256_hex), None if row_id == sha256_hex else row_id)

    @classmethod
    def from_server(cls, client) -> ContentIndex:
        """The content hashes of every row stored for the server's active encoder."""
        index = cls()
        for batch in client.export(with_vectors=False):
            columns = batch.select(["sha256", "id"]).to_pydict()
            for sha, row_id in zip(columns["sha256"], columns["id"], strict=True):
                if sha:
                    index.add(sha, row_id)
        return index

    def claim(self, sha256_hex: str, row_id: str) -> str | None:
        """The id of the row that holds this content under another id; None when there
        is none, and then the content is recorded as `row_id`'s (the caller stores it)."""
        key = _key(sha256_hex)
        with self._lock:
            if key in self._rows:
                held = self._rows[key] or sha256_hex
                if held != row_id:
                    return held
            self._rows[key] = None if row_id == sha256_hex else row_id
            return None


def _key(sha256_hex: str) -> bytes:
    return bytes.fromhex(sha256_hex)[:_KEY_BYTES]
