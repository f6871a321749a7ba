"""--server addresses (client/address.py): a default port, URLs refused with the fix."""

from __future__ import annotations

import pytest

from envad.client.address import DEFAULT_PORT, parse_server_address
from envad.errors import InvalidInput


@pytest.mark.parametrize("given, target", [
    ("127.0.0.1", f"127.0.0.1:{DEFAULT_PORT}"),
    ("scoring.internal", f"scoring.internal:{DEFAULT_PORT}"),
    ("scoring.internal:9000", "scoring.internal:9000"),
    (" 10.0.0.5:50052 ", "10.0.0.5:50052"),
    ("[::1]", f"[::1]:{DEFAULT_PORT}"),
    ("[::1]:7000", "[::1]:7000"),
    ("::1", f"[::1]:{DEFAULT_PORT}"),
    ("unix:/run/envad.sock", "unix:/run/envad.sock"),
])
def test_targets(given, target) -> None:
    assert parse_server_address(given) == target


@pytest.mark.parametrize("given, hint", [
    ("http://127.0.0.1:50051", "--server 127.0.0.1:50051 instead"),
    ("https://scoring.example.org/", "--server scoring.example.org and --tls"),
    ("grpc://h:1", "--server h:1 instead"),
])
def test_urls_are_refused_naming_the_address_to_use(given, hint) -> None:
    with pytest.raises(InvalidInput, match="not a URL") as info:
        parse_server_address(given)
    assert hint in str(info.value)


@pytest.mark.parametrize("given", ["", "host:http", "host:0", "host:70000", ":50051"])
def test_bad_addresses(given) -> None:
    with pytest.raises(InvalidInput):
        parse_server_address(given)


def test_the_cli_sends_a_bare_host_to_the_default_port(monkeypatch) -> None:
    from envad.client.cli import build_parser

    args = build_parser().parse_args(["info", "--server", "127.0.0.1"])
    assert args.server == f"127.0.0.1:{DEFAULT_PORT}"
    monkeypatch.setenv("ENVAD_SERVER", "scoring.internal")
    assert build_parser().parse_args(["info"]).server == f"scoring.internal:{DEFAULT_PORT}"


def test_the_library_takes_the_same_addresses() -> None:
    from envad.client import EnvadClient

    with EnvadClient("127.0.0.1") as client:
        assert client.address == f"127.0.0.1:{DEFAULT_PORT}"
    with pytest.raises(InvalidInput, match="not a URL"):
        EnvadClient("http://127.0.0.1:50051")
