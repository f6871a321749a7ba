"""The `envad` command: one entry point, subcommands contributed by each part.

Each module in COMMAND_MODULES exposes `register(subparsers)`, adding its subcommands
with `set_defaults(func=handler)`. Registration must stay cheap: command modules import
heavy dependencies (torch, onnxruntime, lancedb) inside their handlers, so that
`envad --help` and `envad score` start fast, the client never loads torch, and every
command is listed even with only the base install (`pip install envad`, the client).
A command whose extra is not installed says which one to install (`EXTRA_OF_MODULE`).
Every help page gets its examples and defaults from `cli_help`; a failing command prints
one line from `cli_errors` and exits non-zero, never a traceback (unless `-v`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from envad import __version__
from envad.client.cli_errors import BROKEN_PIPE_EXIT, describe_failure
from envad.client.cli_help import apply_help
from envad.errors import EnvadError

#: The modules that register subcommands, with the extra their commands need (the
#: client's own commands need none; a handler that needs one for some options sets
#: `args.command_extra` itself, as `backfill --engine ray` does; otherwise the extra is
#: named from the module found missing).
COMMAND_MODULES = {
    "envad.server.cli": "server",
    "envad.training.cli": "train",
    "envad.training.evaluate_cli": "train",
    "envad.client.commands": None,
    "envad.client.scan_command": "server",
}
#: extras that include others (`envad[train]` installs `envad[server]`; `envad[ray]`
#: goes with `envad[server]` or `envad[gpu]`, which choose ONNX Runtime's build)
INCLUDED_EXTRAS = {"train": {"server"}}

#: For each importable module an extra provides: (extra, distribution). Checked against
#: pyproject.toml by tests/client/test_client_imports.py.
EXTRA_OF_MODULE = {
    "onnxruntime": ("server", "onnxruntime"),
    "lancedb": ("server", "lancedb"),
    "faiss": ("server", "faiss-cpu"),
    "pyod": ("server", "pyod"),
    "sklearn": ("server", "scikit-learn"),
    "scipy": ("server", "scipy"),
    "threadpoolctl": ("server", "threadpoolctl"),
    "prometheus_client": ("server", "prometheus-client"),
    "grpc_reflection": ("server", "grpcio-reflection"),
    "torch": ("train", "torch"),
    "torchvision": ("train", "torchvision"),
    "onnx": ("train", "onnx"),
    "skimage": ("train", "scikit-image"),
    "matplotlib": ("train", "matplotlib"),
    "pandas": ("train", "pandas"),
    "wilds": ("train", "wilds"),
    "ray": ("ray", "ray"),
    "lance": ("ray", "pylance"),
}


def missing_extra(exc: ModuleNotFoundError, command_extra: str | None = None) -> str | None:
    """The extra to install for the module `exc` did not find, as a command that needs
    `command_extra` should name it (None: the module is not one an extra provides)."""
    root = (exc.name or "").split(".")[0]
    if root not in EXTRA_OF_MODULE:
        return None
    extra = EXTRA_OF_MODULE[root][0]
    return command_extra if extra in INCLUDED_EXTRAS.get(command_extra or "", ()) else extra


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
    for module_name, extra in COMMAND_MODULES.items():
        module = importlib.import_module(module_name)
        before = set(subparsers.choices)
        module.register(subparsers)
        added = set(subparsers.choices) - before
        clash = added & seen
        if clash:
            raise RuntimeError(f"duplicate envad subcommand(s): {sorted(clash)}")
        seen |= added
        for name in added:
            subparsers.choices[name].set_defaults(command_extra=extra)
    apply_help(parser)
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
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`envad info --json | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc, getattr(args, "command_extra", None))
        if extra is None:
            return _fail(exc, args)
        print(f"envad: error: `envad {args.command}` needs the '{extra}' extra "
              f"(module {exc.name!r} is not installed): pip install 'envad[{extra}]'",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("envad: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        return _fail(exc, args)
    return int(code or 0)


def _fail(exc: BaseException, args: argparse.Namespace) -> int:
    """Print the one-line error of a failed command (the traceback too with -v)."""
    if args.verbose and not isinstance(exc, EnvadError):
        logging.getLogger("envad").exception("command failed")
    print(f"envad: error: {describe_failure(exc, args)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
