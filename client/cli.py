"""The `envad` command: one entry point, subcommands contributed by each part.

Each module in COMMAND_MODULES exposes `register(subparsers)`, adding its subcommands
with `set_defaults(func=handler)`. Registration must stay cheap: command modules import
heavy dependencies (torch, onnxruntime, lancedb) inside their handlers, so that
`envad --help` and `envad score` start fast and the client never loads torch.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from envad import __version__
from envad.errors import EnvadError

COMMAND_MODULES = (
    "envad.server.cli",
    "envad.training.cli",
    "envad.training.evaluate_cli",
    "envad.client.commands",
)


def build_parser() -> argparse.ArgumentParser:
    """The full `envad` parser with every part's subcommands registered."""
    parser = argparse.ArgumentParser(
        prog="envad",
        description="Env-aware anomaly detection for camera-trap images.",
    )
    parser.add_argument("--version", action="version", version=f"envad {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    seen: set[str] = set()
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # a part whose optional extra is not installed
            logging.getLogger(__name__).debug("skipping %s: %s", module_name, exc)
            continue
        before = set(subparsers.choices)
        module.register(subparsers)
        added = set(subparsers.choices) - before
        clash = added & seen
        if clash:
            raise RuntimeError(f"duplicate envad subcommand(s): {sorted(clash)}")
        seen |= added
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `envad` command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = args.func(args)
    except EnvadError as exc:
        print(f"envad: error: {exc.code}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("envad: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
