"""Where the server's data lives: a local folder, or a URI on object storage.

`--data-dir` is a path (everything in local files, as on one machine) or a URI LanceDB
accepts (`s3://bucket/prefix`, `gs://...`, `az://...`) with storage options
(`--storage-option KEY=VALUE`, LanceDB's keys: `aws_endpoint`, `aws_region`,
`allow_http`, `aws_access_key_id`, ...; the AWS_* environment variables are honoured
by LanceDB and by the object-store client alike). On a URI, the table is LanceDB's own;
the small files (detector bundles, pointers, weight bindings, camera statistics
snapshots) are objects under the URI, written through `remote_dir.RemoteDir`, and
mirrored in a local cache folder that can be lost at any time. This module only parses
(it loads no storage library, so settings load light).

Secret option values never reach a log line or an error message (`redact`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from envad.errors import InvalidInput

URI_PATTERN = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]+)://(?P<rest>.+)$")
#: option keys whose values are secrets (never shown)
_SECRET_WORDS = ("secret", "token", "password", "sas", "account_key", "credential")


def is_uri(location: str | os.PathLike) -> bool:
    """True when `location` names object storage (`s3://...`), not a local path."""
    match = URI_PATTERN.match(str(location))
    return match is not None and match["scheme"] != "file"


def local_path(location: str | os.PathLike) -> Path:
    """A local data dir as a Path (`file://` URIs included)."""
    text = str(location)
    return Path(text[len("file://"):]) if text.startswith("file://") else Path(text)


def parse_storage_options(value: object) -> dict[str, str]:
    """Storage options from a TOML table, a list of KEY=VALUE (the CLI) or one string
    of comma-separated KEY=VALUE pairs (ENVAD_STORAGE_OPTIONS)."""
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        pairs = [(str(k), v) for k, v in value.items()]
    else:
        items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
        pairs = []
        for item in items:
            key, sep, text = str(item).partition("=")
            if not sep or not key.strip():
                raise InvalidInput(f"storage option {key.strip() or item!r}: expected KEY=VALUE")
            pairs.append((key, text))
    options = {}
    for key, text in pairs:
        shown = "true" if text is True else "false" if text is False else str(text)
        options[key.strip().lower()] = shown.strip()
    return options


def is_secret(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


def shown_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options as a log line may show them: secret values replaced by '***'."""
    return {k: ("***" if is_secret(k) else v) for k, v in options.items()}


def redact(text: str, options: Mapping[str, str]) -> str:
    """`text` with every secret option value replaced by '***'."""
    for key, value in options.items():
        if value and is_secret(key):
            text = text.replace(value, "***")
    return text


def join(uri: str, *parts: str) -> str:
    """`uri` with path parts appended ('/'-separated whatever the OS)."""
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])
