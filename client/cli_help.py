"""How every `envad` help page reads: defaults shown once, and an example on each page.

`apply_help(parser)` runs once over the finished parser (every part's subcommands,
nested ones included): it sets `EnvadHelpFormatter` and appends the command's entry of
`EXAMPLES` to its epilog. A command that brings its own examples (an epilog containing
"examples:") keeps them; tests/client/test_cli_help.py checks that every page has one.
"""

from __future__ import annotations

import argparse
import re

#: Examples per command path ("models list"), shown at the end of its help page.
EXAMPLES: dict[str, str] = {
    "serve": "envad serve --data-dir var/envad --port 50051\n"
             "ENVAD_AUTH_TOKEN=secret envad serve --host 0.0.0.0 --metrics-port 9100",
    "data": "envad data photodigits --out var/photodigits --size 32",
    "data photodigits": "envad data photodigits --out var/photodigits --size 32 --seed 0",
    "train": "envad train --data var/photodigits --algorithm erm --out runs/erm-s0 "
             "--epochs 5\nenvad train --data var/photodigits --algorithm irm --out runs/irm "
             "--resume",
    "export": "envad export runs/erm-s0 --out var/envad/models/erm-s0.onnx",
    "evaluate": "envad evaluate --data var/photodigits --seeds 0,1,2 --out reports/pd32\n"
                "envad evaluate --data DIR --pipeline default --seeds 0 --out reports/mine",
    "select": "envad select --data var/photodigits --out var/selection",
    "sweep": "envad sweep --data var/demo/photodigits --algorithms erm --runs-dir "
             "var/demo/runs --out var/sweep-erm\n"
             "envad sweep --data var/photodigits --seeds 0,1,2 --device cuda --out "
             "var/sweep",
    "scan": "envad scan mycams --model encoder.onnx\n"
            "envad scan mycams --model encoder.onnx --reference normals --scores-out "
            "scores.csv\n"
            "envad scan md.json --model encoder.onnx --image-root /data/cams --env-level 1",
    "score": "envad score new/IMG_0001.JPG new/IMG_0002.JPG --env cam-12\n"
             "envad score new/*.JPG --json --server scoring.internal:50051\n"
             "envad score new/*.JPG --server 10.0.0.5,10.0.0.6   # spread over replicas",
    "fit": "envad fit                       # split train if stored, else every stored row\n"
           "envad fit --split archive --detectors KNN,LOF5 --json",
    "reset-camera-stats": "envad reset-camera-stats cam-12 cam-13",
    "info": "envad info\nenvad info --json --server scoring.internal",
    "models": "envad models list\nenvad models activate erm-s0",
    "models list": "envad models list --json",
    "models activate": "envad models activate erm-s0",
    "export-embeddings": "envad export-embeddings --out emb.parquet --split train",
    "health": "envad health --wait 30 && envad info",
    "backfill": "envad backfill mycams                       # a folder of camera folders\n"
                "envad backfill mycams --resume              # after a crash or Ctrl-C\n"
                "envad backfill pkg --scores-out scores.json # Camtrap DP, MegaDetector out\n"
                "envad backfill mycams --server 10.0.0.5,10.0.0.6 --writer 10.0.0.4",
    "retrain": "envad retrain --data var/photodigits --workdir jobs/new --archive /archive",
}


#: "(0: all)" in a help text: what the value 0 means.
ZERO_MEANS = re.compile(r"\(0: ([^)]*)\)")


class EnvadHelpFormatter(argparse.HelpFormatter):
    """Shows an option's default once: not when the help text already talks about its
    default, and not for defaults that say nothing (None, False, "", [])."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or not shows_default(action):
            return text
        zero = ZERO_MEANS.search(text)
        if zero and action.default == 0:     # "(0: all)" says what the default 0 means
            return f"{text[:zero.start()]}(default: 0 = {zero.group(1)}){text[zero.end():]}"
        return f"{text} (default: %(default)s)"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:   # laid out by hand (examples, settings tables): keep as written
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def shows_default(action: argparse.Action) -> bool:
    """True when an option's default is worth printing."""
    default = action.default
    if default is argparse.SUPPRESS or default is None or default is False:
        return False
    if isinstance(default, (str, list, tuple)) and not default:
        return False
    return bool(action.option_strings) and action.nargs != 0


def subcommands(parser: argparse.ArgumentParser, path: str = ""):
    """(command path, parser) of every subcommand below `parser`, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                sub_path = f"{path} {name}".strip()
                yield sub_path, sub
                yield from subcommands(sub, sub_path)


def apply_help(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand the envad formatter and its examples."""
    for path, sub in subcommands(parser):
        sub.formatter_class = EnvadHelpFormatter
        example = EXAMPLES.get(path)
        if example and "examples:" not in (sub.epilog or ""):
            block = "examples:\n" + "".join(f"  {line}\n" for line in example.splitlines())
            sub.epilog = f"{sub.epilog}\n\n{block}" if sub.epilog else block
