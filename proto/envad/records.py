"""Result records shared by the server and the client (mirrors of envad.v1 messages)."""

from __future__ import annotations

from dataclasses import dataclass


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
