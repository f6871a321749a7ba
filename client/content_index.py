"""Images already stored under another id, found by the sha256 of their bytes.

The store is idempotent by id, but one image reaches it under different ids from
different sources (a Camtrap DP package names it deploymentID/mediaID, a plain image
tree by its sha256, a folder-format dataset by its `id` column), and would then be
stored twice, in two environments. A backfill loads the stored rows' content hashes
once (metadata only: through Export for the service engine, from the Lance table for
the Ray engine) and checks every image it reads against them and against the images
sent before it in the same run; `duplicate_outcome` is the rule both engines apply.

Memory: one dict entry per stored row, keyed by 16 bytes of the hash; the row's id is
kept only when it is not the hash itself (an image tree's rows cost nothing more).
Measured with `python -m benchmarks.content_index`: 91 MB per million rows stored under
their hash, 154 MB per million rows with short named ids (docs/benchmarks.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from envad.client.backfill_plan import item_outcome
from envad.client.checkpoint import Outcome
from envad.client.sources import SourceItem

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

    def add_rows(self, shas: Iterable[str | None], ids: Iterable[str]) -> ContentIndex:
        """Record stored rows (their sha256 and id columns); rows without a hash are
        left out. Returns self."""
        for sha, row_id in zip(shas, ids, strict=True):
            if sha:
                self.add(sha, row_id)
        return self

    @classmethod
    def from_server(cls, client) -> ContentIndex:
        """The content hashes of every row stored for the server's active encoder."""
        index = cls()
        for batch in client.export(with_vectors=False):
            columns = batch.select(["sha256", "id"]).to_pydict()
            index.add_rows(columns["sha256"], columns["id"])
        return index

    @classmethod
    def from_lance(cls, dataset) -> ContentIndex:
        """The content hashes of every row of a store table (a `lance.LanceDataset`),
        read batch by batch (the Ray engine, which writes the table directly)."""
        index = cls()
        for batch in dataset.to_batches(columns=["sha256", "id"]):
            columns = batch.to_pydict()
            index.add_rows(columns["sha256"], columns["id"])
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


def duplicate_outcome(content: ContentIndex | None, item: SourceItem, sha256_hex: str,
                      row_id: str) -> Outcome | None:
    """The rule of both backfill engines: the `skipped` outcome of an item whose content
    is stored under another id (naming that id), or None when it is not (and the
    content is then claimed for `row_id`, which the caller stores). `content` None:
    duplicates are kept (--keep-duplicates)."""
    if content is None:
        return None
    held = content.claim(sha256_hex, row_id)
    if held is None:
        return None
    return item_outcome(item, "skipped", held, reason=DUPLICATE_REASON)


def _key(sha256_hex: str) -> bytes:
    return bytes.fromhex(sha256_hex)[:_KEY_BYTES]
