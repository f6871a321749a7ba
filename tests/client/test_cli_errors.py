"""The one-line messages of failed commands (client/cli_errors.py)."""

from __future__ import annotations

import argparse
import errno

from envad.client.cli_errors import describe_failure, one_line
from envad.client.errors import DeadlineExceeded
from envad.errors import Unauthenticated, Unavailable

ARGS = argparse.Namespace(server="scoring.internal:50051", command="info")


def test_gRPC_details_are_folded_into_one_line() -> None:
    text = describe_failure(Unavailable("GetInfo: failed to connect\n  last error: refused"), ARGS)
    assert "\n" not in text and text.startswith("UNAVAILABLE: GetInfo: failed to connect last")
    assert "running at scoring.internal:50051?" in text and "`envad serve`" in text
    assert "`envad serve`" in describe_failure(DeadlineExceeded("Fit: deadline"), ARGS)


def test_hints_for_tokens_files_and_the_unexpected() -> None:
    assert describe_failure(Unauthenticated("bad token"), ARGS).endswith(
        "pass --token or set $ENVAD_TOKEN")
    assert describe_failure(PermissionError(errno.EACCES, "denied", "/x"), ARGS) == (
        "permission denied: /x")
    assert describe_failure(OSError(errno.ENOSPC, "No space left on device", "/out"),
                            ARGS) == "No space left on device: /out"
    unexpected = describe_failure(RuntimeError("boom\nsecond line"), ARGS)
    assert unexpected == ("unexpected RuntimeError: boom second line -- run `envad -v info "
                          "...` to see the traceback")


def test_without_a_server_flag_no_server_hint() -> None:
    text = describe_failure(Unavailable("down"), argparse.Namespace(command="scan"))
    assert text == "UNAVAILABLE: down"
    assert one_line("  a \n\t b ") == "a b"
