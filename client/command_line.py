"""What every `envad` client command shares: connection flags, the client they open,
row filter flags, and JSON or table output."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from envad.client.address import parse_server_address, parse_server_addresses
from envad.client.library import EnvadClient
from envad.client.results import RowFilter
from envad.defaults import DEFAULT_ADDRESS, DEFAULT_PORT
from envad.errors import InvalidInput


def connection_parser(timeout: float | None = 60.0) -> argparse.ArgumentParser:
    """Flags shared by every command that talks to a server (a new parser per command:
    argparse parents share their actions, so defaults must not be changed afterwards)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection")
    group.add_argument("--server", metavar="HOST[:PORT][,HOST[:PORT]...]",
                       type=server_addresses,
                       default=os.environ.get("ENVAD_SERVER") or DEFAULT_ADDRESS,
                       help=f"server address, or replicas' addresses joined by commas (calls "
                            f"are spread over them, and re-sent to another when one fails); "
                            f"the port defaults to {DEFAULT_PORT} (default: $ENVAD_SERVER, "
                            f"else {DEFAULT_ADDRESS}; now %(default)s)")
    group.add_argument("--writer", metavar="HOST[:PORT]", type=writer_address,
                       default=os.environ.get("ENVAD_WRITER") or None,
                       help="the server that takes writes (ingest, fit, labels, model "
                            "activation, score --store); needed when --server lists several "
                            "(default: $ENVAD_WRITER, else the --server address)")
    group.add_argument("--token", default=None,
                       help="bearer token (default: $ENVAD_TOKEN)")
    group.add_argument("--tls", action="store_true", help="connect with TLS")
    group.add_argument("--ca-cert", type=Path, help="PEM root certificates for TLS")
    group.add_argument("--client-cert", type=Path, help="PEM client certificate (mutual TLS)")
    group.add_argument("--client-key", type=Path, help="PEM client key (mutual TLS)")
    group.add_argument("--server-name", help="TLS server name override")
    group.add_argument("--timeout", type=float, default=timeout,
                       help="deadline of each call in seconds, retries included (default: "
                            + ("none)" if timeout is None else "%(default)s)"))
    return parent


def server_addresses(text: str) -> str:
    """argparse type of --server: HOST[:PORT][,...] -> HOST:PORT[,...], URLs refused."""
    try:
        return ",".join(parse_server_addresses(text))
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def writer_address(text: str) -> str:
    """argparse type of --writer: HOST[:PORT] -> HOST:PORT (one address)."""
    try:
        return parse_server_address(text, "--writer")
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def open_client(args):
    return EnvadClient(
        args.server, writer=args.writer, timeout=args.timeout, token=args.token, tls=args.tls,
        root_certificates=args.ca_cert, client_certificate=args.client_cert,
        client_key=args.client_key, server_name=args.server_name,
    )


def add_filter_flags(parser: argparse.ArgumentParser, split_help: str = "") -> None:
    parser.add_argument("--env", action="append", default=[], metavar="ENV",
                        help="only rows of this environment (repeatable)")
    parser.add_argument("--split", action="append", default=[], metavar="SPLIT",
                        help=split_help or "only rows of this split (repeatable)")
    parser.add_argument("--label", action="append", default=[], metavar="LABEL",
                        help="only rows with this label (repeatable)")


def row_filter(args):
    return RowFilter(envs=tuple(args.env), splits=tuple(args.split), labels=tuple(args.label))


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def print_json(value) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    json.dump(value, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def print_table(header: list[str], rows: list[list]) -> None:
    cells = [header] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
