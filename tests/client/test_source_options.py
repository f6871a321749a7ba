"""The source options shared by `envad backfill` and `envad scan`
(client/source_options.py): one definition, the same flags on both commands."""

from __future__ import annotations

import argparse

from envad.client.cli import build_parser
from envad.client.cli_help import subcommands
from envad.client.source_options import FORMATS, add_source_arguments, source_options
from envad.client.sources import SOURCES

PAGES = dict(subcommands(build_parser()))


def source_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    (group,) = [g for g in parser._action_groups if g.title == "source"]
    return {flag: action for action in group._group_actions for flag in action.option_strings}


def test_the_formats_are_the_registered_sources() -> None:
    assert sorted(FORMATS) == sorted(["auto", *SOURCES])


def test_backfill_and_scan_offer_the_same_source_options() -> None:
    backfill, scan = source_flags(PAGES["backfill"]), source_flags(PAGES["scan"])
    assert set(backfill) - set(scan) == {"--set-split"}    # a scan chooses its splits
    assert set(scan) <= set(backfill) and "--image-root" in scan and "--env-level" in scan
    for flag, action in scan.items():
        assert (action.help, action.default, action.choices) == (
            backfill[flag].help, backfill[flag].default, backfill[flag].choices), flag


def test_only_the_given_options_reach_the_source() -> None:
    parser = argparse.ArgumentParser()
    add_source_arguments(parser)
    assert source_options(parser.parse_args([])) == {}
    given = parser.parse_args(["--env-level", "1", "--image-root", "/data", "--skip-empty"])
    assert source_options(given) == {"env_level": 1, "image_root": given.image_root,
                                     "skip_empty": True}
