"""Every `envad` help page (client/cli_help.py): an example, each default shown once
and readably, and only files that exist in the repository referenced."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from envad.client.cli import build_parser
from envad.client.cli_help import EXAMPLES, subcommands

ROOT = Path(__file__).resolve().parents[2]
PAGES = dict(subcommands(build_parser()))


def expanded_helps(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    formatter = parser._get_formatter()
    return [(", ".join(a.option_strings) or a.dest, formatter._expand_help(a))
            for a in parser._actions if a.help and a.help is not argparse.SUPPRESS]


@pytest.mark.parametrize("path", sorted(PAGES))
def test_every_page_ends_with_an_example(path) -> None:
    text = PAGES[path].format_help()
    examples = text.split("examples:\n", 1)
    assert len(examples) == 2, f"`envad {path} --help` has no examples"
    command = path.split()[0]
    assert re.search(rf"^  envad {re.escape(command)}\b", examples[1], re.M), examples[1]


@pytest.mark.parametrize("path", sorted(PAGES))
def test_defaults_are_shown_once_and_readably(path) -> None:
    text = PAGES[path].format_help()
    for bad in ("PosixPath(", "%%", "(default: None)", "(default: [])", "(default: )",
                "(default: False)"):
        assert bad not in text, f"`envad {path} --help` shows {bad!r}"
    for option, help_text in expanded_helps(PAGES[path]):
        said = len(re.findall(r"\(default\b|default:|; default\b|\bdefault \d", help_text))
        assert said <= 1, f"`envad {path} --help` {option}: {help_text!r}"
        assert not re.search(r"\(0: [^)]*\) \(default: 0", help_text), help_text


@pytest.mark.parametrize("path", sorted(PAGES))
def test_referenced_files_exist(path) -> None:
    text = " ".join(PAGES[path].format_help().split())
    for name in re.findall(r"\b((?:docs|training|server|client)/[\w./-]+\.(?:md|py))", text):
        assert (ROOT / name).is_file(), f"`envad {path} --help` points to missing {name}"
    for name in re.findall(r"\b([A-Z]+\.md)\b", text):
        assert (ROOT / name).is_file() or (ROOT / "docs" / name).is_file(), name


def test_examples_name_only_real_commands() -> None:
    assert set(EXAMPLES) <= set(PAGES)


def test_the_serve_page_shows_settings_as_values() -> None:
    text = PAGES["serve"].format_help()
    assert "var/envad" in text and "PosixPath" not in text
