"""What `envad label` accepts for a stored row: its id, a unique prefix of it (as the
docs and the review page shorten them), or its file as stored (a path, relative to here
or absolute, or a file:// or http(s) URL)."""

from __future__ import annotations

import bisect
import re
import urllib.parse
import urllib.request
from pathlib import Path

from envad.errors import InvalidInput

FULL_ID = re.compile(r"[0-9a-f]{64}")
MIN_PREFIX = 6


def needs_lookup(tokens: list[str]) -> bool:
    """False when every token is a full sha256 id (sent as they are)."""
    return not all(FULL_ID.fullmatch(t) for t in tokens)


def stored_rows(client, timeout: float | None = None) -> tuple[list[str], list[str]]:
    """(ids, uris) of the active encoder's stored rows."""
    ids: list[str] = []
    uris: list[str] = []
    for batch in client.export(with_vectors=False, timeout=timeout):
        ids += [str(v) for v in batch.column("id").to_pylist()]
        uris += [str(v or "") for v in batch.column("uri").to_pylist()]
    return ids, uris


def resolve(tokens: list[str], ids: list[str], uris: list[str]) -> list[str]:
    """The stored id each token names (a token naming none is kept as it is, for the
    server to report as not stored); an ambiguous prefix or file is an error."""
    known = set(ids)
    by_uri: dict[str, list[str]] = {}
    for id, uri in zip(ids, uris, strict=True):
        if uri:
            by_uri.setdefault(_as_path(uri), []).append(id)
    ordered = sorted(ids)
    out = []
    for token in tokens:
        if token in known:
            out.append(token)
            continue
        found = by_uri.get(_as_path(token), [])
        if not found and len(token) >= MIN_PREFIX:
            found = _with_prefix(ordered, token)
        if len(found) > 1:
            shown = ", ".join(f[:12] for f in found[:5])
            raise InvalidInput(f"{token!r} names {len(found)} stored rows ({shown}"
                               f"{' ...' if len(found) > 5 else ''}): give more of the id")
        out.append(found[0] if found else token)
    return out


def _with_prefix(ordered: list[str], prefix: str) -> list[str]:
    at = bisect.bisect_left(ordered, prefix)
    found = []
    while at < len(ordered) and ordered[at].startswith(prefix):
        found.append(ordered[at])
        at += 1
    return found


def _as_path(location: str) -> str:
    """A local file's absolute path (from a path or a file:// URL); other URLs as given."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme in ("http", "https"):
        return location
    if parsed.scheme == "file":
        return str(Path(urllib.request.url2pathname(parsed.path)).resolve())
    try:
        return str(Path(location).resolve())
    except (OSError, ValueError):
        return location
