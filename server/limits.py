"""Request limits and the one rule every text field of a request follows.

Ids, environments, labels, splits and uris are stored, filtered on and echoed in error
messages, so all of them pass the same check here, at the request: a value Ingest
accepts can always be filtered on, and a value it refuses is refused for its own item
only. docs/api.md's limits table lists these constants (a test checks it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from envad.errors import InvalidInput
from envad.records import RowFilter
from envad.server.config import ServerConfig

#: Longest item id (the default id, a sha256, is 64 characters).
MAX_ID_CHARS = 512
#: Longest environment, label or split name.
MAX_NAME_CHARS = 256
#: Longest source uri.
MAX_URI_CHARS = 4096
#: Most values in one field (envs, splits or labels) of a filter.
MAX_FILTER_VALUES = 1000
#: Most environments one ResetCameraStats names.
MAX_RESET_ENVS = 1000
#: Characters of a caller's value that an error message quotes.
MAX_ECHO_CHARS = 64
#: Longest error message sent back as a status (gRPC metadata is bounded).
MAX_ERROR_CHARS = 1000

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shorten(value: object, limit: int = MAX_ECHO_CHARS) -> str:
    """`repr(value)` cut to about `limit` characters, saying how long the value was."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} chars" if isinstance(value, str | bytes) else "long"
    return f"{text[:limit]}... ({size})"


def text_problem(field: str, value: str, max_chars: int) -> str | None:
    """Why `value` cannot be the `field` of a stored row or a filter; None when it can."""
    if len(value) > max_chars:
        return f"{field} {shorten(value)} is longer than {max_chars} characters"
    if _CONTROL.search(value):
        return f"{field} {shorten(value)} contains a control character"
    return None


def check_text(field: str, value: str, max_chars: int) -> str:
    """`value` if it passes `text_problem`, else InvalidInput naming the problem."""
    problem = text_problem(field, value, max_chars)
    if problem:
        raise InvalidInput(problem)
    return value


def check_filter(row_filter: RowFilter, what: str = "filter") -> RowFilter:
    """`row_filter` if every field has at most MAX_FILTER_VALUES valid names."""
    for field, values in (("envs", row_filter.envs), ("splits", row_filter.splits),
                          ("labels", row_filter.labels)):
        check_names(f"{what}.{field}", values, MAX_FILTER_VALUES)
    return row_filter


def check_names(field: str, values: Sequence[str], max_values: int) -> None:
    """At most `max_values` names, each a valid name (InvalidInput otherwise)."""
    if len(values) > max_values:
        raise InvalidInput(f"{field} has {len(values)} values, above the limit of "
                           f"{max_values}")
    for value in values:
        check_text(f"{field} value", value, MAX_NAME_CHARS)


def check_vector(values: Sequence[float]) -> np.ndarray:
    """A query vector as float32, refused when non-finite or so large that its squared
    length (what L2 distances are made of) overflows float32."""
    vector = np.asarray(values, dtype=np.float64)
    if not np.isfinite(vector).all():
        raise InvalidInput("query vector contains NaN or infinity")
    squared = float(np.square(vector).sum())
    if not squared < float(np.finfo(np.float32).max):
        raise InvalidInput(f"query vector is too large: its squared length "
                           f"{squared:.3g} overflows float32 distances (largest value "
                           f"{float(np.abs(vector).max()):.3g})")
    return vector.astype(np.float32)


def clip_message(message: str) -> str:
    """An error message cut to MAX_ERROR_CHARS, one line."""
    line = " ".join(message.split("\n"))
    if len(line) <= MAX_ERROR_CHARS:
        return line
    return line[:MAX_ERROR_CHARS - 20] + f"... ({len(line)} chars)"


def limits_table_markdown() -> str:
    """The limits table of docs/api.md, rendered from the constants and settings that
    own each limit (tests/server/test_limits.py compares)."""
    # the engine imports this module (a cycle)
    from envad.server.engine import MAX_EXPORT_BATCH, MAX_SEARCH_K, MAX_TOP_K

    defaults = ServerConfig()
    rows = [
        ("item `id`", f"{MAX_ID_CHARS} characters, no control character",
         "that item fails (`INVALID_ARGUMENT`), the rest of the request goes on"),
        ("item `env`, `label`, `split`", f"{MAX_NAME_CHARS} characters, no control "
         "character", "that item fails (`Score`'s own `label`/`split`: the request); the "
         "same rule as filter values, so every stored value can be filtered on"),
        ("item `uri`", f"{MAX_URI_CHARS} characters, no control character",
         "that item fails"),
        ("item `event`", f"{MAX_NAME_CHARS} characters, no control character",
         "that item fails"),
        ("item `timestamp`", "0001-01-01 .. 9999-12-31; kept to the microsecond",
         "that item fails; finer digits (nanoseconds) are cut"),
        ("`Filter` (envs, splits, labels)", f"{MAX_FILTER_VALUES} values per field, each "
         "a valid name", "the request fails (`INVALID_ARGUMENT`)"),
        ("`ResetCameraStats.envs`", f"{MAX_RESET_ENVS} names", "the request fails"),
        ("`Score.top_k`", f"1..{MAX_TOP_K}", "the request fails (in `ScoreStream`: that "
         "request's `error`)"),
        ("`Search.k`", f"1..{MAX_SEARCH_K}", "the request fails"),
        ("`Search.vector`", "finite, squared length below float32's maximum",
         "the request fails"),
        ("`Export.batch_size`", f"1..{MAX_EXPORT_BATCH}", "the request fails"),
        ("one encoded image", f"`max_image_mb` = {defaults.max_image_mb} MB, "
         f"`max_image_megapixels` = {defaults.max_image_megapixels}", "that item fails"),
        ("one gRPC message", f"`max_message_mb` = {defaults.max_message_mb} MB",
         "`RESOURCE_EXHAUSTED` from gRPC before the message is parsed; a `ScoreStream` "
         "ends there"),
        ("an error message", f"{MAX_ERROR_CHARS} characters, one line; a caller's value "
         f"is quoted up to {MAX_ECHO_CHARS} characters", "longer text is cut"),
    ]
    lines = ["| what | limit | beyond it |", "| --- | --- | --- |"]
    lines += [f"| {what} | {limit} | {beyond} |" for what, limit, beyond in rows]
    return "\n".join(lines) + "\n"
