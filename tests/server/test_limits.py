"""The one rule for request text fields, the filter cap, vectors, messages; the limits
table of docs/api.md is the rendering of the constants."""

from __future__ import annotations

from pathlib import Path

import pytest

from envad.errors import InvalidInput
from envad.records import RowFilter
from envad.server.config import ServerConfig
from envad.server.limits import (
    MAX_ECHO_CHARS,
    MAX_ERROR_CHARS,
    MAX_FILTER_VALUES,
    MAX_NAME_CHARS,
    check_filter,
    check_vector,
    clip_message,
    limits_table_markdown,
    shorten,
    text_problem,
)

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


@pytest.mark.parametrize("value", ["a\nb", "tab\there", "nul\x00", "del\x7f", "x" * 257])
def test_text_problem_names_the_field_and_quotes_a_short_value(value):
    problem = text_problem("env", value, MAX_NAME_CHARS)
    assert problem is not None and problem.startswith("env ")
    assert len(problem) < MAX_ECHO_CHARS + 80


@pytest.mark.parametrize("value", ["", "cam-7", "caméra 7 (north)", "x" * 256, "it's"])
def test_ordinary_names_pass(value):
    assert text_problem("env", value, MAX_NAME_CHARS) is None


def test_filter_cap_and_values():
    check_filter(RowFilter(envs=tuple(f"e{i}" for i in range(MAX_FILTER_VALUES))))
    with pytest.raises(InvalidInput, match=f"limit of {MAX_FILTER_VALUES}"):
        check_filter(RowFilter(labels=tuple(f"e{i}" for i in range(MAX_FILTER_VALUES + 1))))
    with pytest.raises(InvalidInput, match="filter.splits value 'a\\\\nb'"):
        check_filter(RowFilter(splits=("a\nb",)))


def test_vectors_whose_distances_overflow_are_refused():
    assert check_vector([1.0, -2.5]).dtype.name == "float32"
    for values in ([3e38, 0.0], [float("nan")], [2e19] * 4):
        with pytest.raises(InvalidInput):
            check_vector(values)


def test_echoes_and_messages_are_bounded():
    assert shorten("y" * 10_000).endswith("(10000 chars)")
    clipped = clip_message("line\n" * 10_000)
    assert "\n" not in clipped and len(clipped) <= MAX_ERROR_CHARS


def test_api_doc_limits_table_is_the_rendering_of_the_constants():
    assert limits_table_markdown() in API_DOC.read_text(), (
        "docs/api.md's limits table differs from server/limits.py: paste `python -c "
        "'from envad.server.limits import limits_table_markdown as t; print(t())'`")


def test_message_limit_sits_just_above_the_image_limit():
    """A message a little over the largest image is refused by gRPC before it is read;
    far larger ones never reach the parser (it was 256 MB against 64 MB images)."""
    config = ServerConfig()
    assert config.max_image_mb < config.max_message_mb <= config.max_image_mb + 16
