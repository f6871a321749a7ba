"""--server and --writer addresses (client/address.py): a default port, lists of
replicas, URLs refused with the fix."""

from __future__ import annotations

import pytest

from envad.client.address import DEFAULT_PORT, parse_server_address, parse_server_addresses
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


def test_a_list_reads_each_address_as_one() -> None:
    assert parse_server_addresses(" 10.0.0.5 ,10.0.0.6:7000,[::1]") == (
        f"10.0.0.5:{DEFAULT_PORT}", "10.0.0.6:7000", f"[::1]:{DEFAULT_PORT}")
    assert parse_server_addresses("scoring.internal") == (f"scoring.internal:{DEFAULT_PORT}",)


@pytest.mark.parametrize("given, message", [
    ("h1:1,,h2:2", "an empty address in its list"),
    ("h1:1,", "an empty address in its list"),
    ("h1:1,h2:70000", "--server 'h2:70000': the port must be a number"),
    ("h1:1,http://h2:2", "use --server h2:2 instead"),
    ("h1:1,unix:/run/envad.sock", "a unix: socket cannot be listed"),
])
def test_a_bad_list_names_the_bad_element(given, message) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_server_addresses(given)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_writer_is_one_address() -> None:
    assert parse_server_address("w1", "--writer") == f"w1:{DEFAULT_PORT}"
    with pytest.raises(InvalidInput, match="--writer 'w1,w2': pass one HOST:PORT"):
        parse_server_address("w1,w2", "--writer")


def test_the_cli_takes_a_list_and_a_writer(monkeypatch, capsys) -> None:
    from envad.client.cli import build_parser
    from envad.client.command_line import open_client

    monkeypatch.delenv("ENVAD_WRITER", raising=False)
    args = build_parser().parse_args(["info", "--server", "r1,r2:7000", "--writer", "w1"])
    assert args.server == f"r1:{DEFAULT_PORT},r2:7000" and args.writer == f"w1:{DEFAULT_PORT}"
    monkeypatch.setenv("ENVAD_WRITER", "w2:9000")
    args = build_parser().parse_args(["info", "--server", "127.0.0.1:1,127.0.0.1:2"])
    with open_client(args) as client:
        assert client.writer == "w2:9000"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["info", "--writer", "w1,w2"])
    assert "pass one HOST:PORT here, not a list" in capsys.readouterr().err


def test_the_library_writes_to_the_server_unless_told(monkeypatch) -> None:
    from envad.client import EnvadClient

    monkeypatch.delenv("ENVAD_WRITER", raising=False)
    with EnvadClient("127.0.0.1") as client:
        assert client.writer == client.address == f"127.0.0.1:{DEFAULT_PORT}"
    with EnvadClient("127.0.0.1:1, 127.0.0.1:2") as client:
        assert client.address == "127.0.0.1:1,127.0.0.1:2" and client.writer is None
    monkeypatch.setenv("ENVAD_WRITER", "127.0.0.1:3")
    with EnvadClient("127.0.0.1:1,127.0.0.1:2") as client:
        assert client.writer == "127.0.0.1:3"
