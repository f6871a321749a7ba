"""Result records and the image-id rule shared by the server and the client."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def sha256_hex(data: bytes) -> str:
    """The default envad id of an image: the lowercase hex sha256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ItemError:
    """A problem with one item of a batch or stream (never aborts the batch)."""

    index: int
    id: str
    code: str
    message: str


@dataclass(frozen=True)
class Provenance:
    """Which encoder, detector bundle and store version produced a result."""

    model_id: str = ""
    model_sha256: str = ""
    bundle_id: str = ""
    table_version: int = 0
    server_version: str = ""
    space: str = ""
