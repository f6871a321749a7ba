"""What `envad` prints when a command fails: one line on stderr, with a hint where one
helps, and the exit code. No traceback reaches the user unless `-v` asks for it."""

from __future__ import annotations

import argparse

from envad.errors import EnvadError

#: Exit code of a command whose output pipe was closed (`envad info --json | head`):
#: 128 + SIGPIPE, as the shell reports a process killed by it.
BROKEN_PIPE_EXIT = 141

CONNECTION_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


def one_line(text: str) -> str:
    """`text` with its whitespace (gRPC details span lines) folded into single spaces."""
    return " ".join(str(text).split())


def describe_failure(exc: BaseException, args: argparse.Namespace) -> str:
    """The one-line message (after "envad: error: ") for a command that raised `exc`."""
    if isinstance(exc, EnvadError):
        message = f"{exc.code}: {one_line(str(exc))}"
        if exc.code in CONNECTION_CODES and hasattr(args, "server"):
            message += (f" -- is an envad server running at {args.server}? Start one with "
                        "`envad serve` or pass --server HOST:PORT (or set $ENVAD_SERVER)")
        elif exc.code == "UNAUTHENTICATED":
            message += " -- pass --token or set $ENVAD_TOKEN"
        return message
    if isinstance(exc, IsADirectoryError):
        return (f"{exc.filename} is a folder, not a file -- for a whole folder use "
                "`envad scan FOLDER` or `envad backfill FOLDER --scores-out FILE`")
    if isinstance(exc, FileNotFoundError):
        name = str(exc.filename)
        hint = " -- the shell found no file matching this pattern" if any(
            c in name for c in "*?[") else ""
        return f"no such file or folder: {name}{hint}"
    if isinstance(exc, PermissionError):
        return f"permission denied: {exc.filename}"
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{one_line(exc.strerror or str(exc))}{where}"
    return (f"unexpected {type(exc).__name__}: {one_line(str(exc))} -- run `envad -v "
            f"{getattr(args, 'command', '') or ''} ...` to see the traceback")
