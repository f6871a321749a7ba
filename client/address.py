"""`--server` and `--writer` addresses: HOST[:PORT] with a default port, lists of them,
and a clear refusal of URLs.

gRPC targets are `HOST:PORT`; a bare host would otherwise be sent to port 443 by the
resolver, and `http://host:port` fails deep inside gRPC with an obscure message.
"""

from __future__ import annotations

import re

from envad.defaults import DEFAULT_ADDRESS, DEFAULT_PORT
from envad.errors import InvalidInput

__all__ = ["DEFAULT_PORT", "parse_server_address", "parse_server_addresses"]
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def parse_server_address(text: str, option: str = "--server") -> str:
    """`text` as a gRPC `HOST:PORT` target; the port defaults to DEFAULT_PORT.

    Accepts `host`, `host:port`, `[v6]`, `[v6]:port` and `unix:PATH`; a URL
    (`http://...`, `grpc://...`), a list or a bad port raises InvalidInput naming the
    fix and `option`, the flag the address came from.
    """
    value = text.strip()
    scheme = _SCHEME.match(value)
    if scheme:
        rest = value[scheme.end():].split("/", 1)[0]
        tls = " and --tls" if scheme.group(1).lower() in ("https", "grpcs") else ""
        raise InvalidInput(f"{option} takes HOST:PORT, not a URL: use {option} "
                           f"{rest or 'HOST:PORT'}{tls} instead of {text!r}")
    if not value:
        raise InvalidInput(f"{option} is empty: pass HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    if "," in value:
        raise InvalidInput(f"{option} {text!r}: pass one HOST:PORT here, not a list")
    if value.startswith("unix:"):
        return value
    if value.startswith("["):                       # [IPv6] or [IPv6]:port
        host, _, port = value[1:].partition("]")
        port = port[1:] if port.startswith(":") else port
        return f"[{host}]:{_port(port, text, option)}"
    if value.count(":") > 1:                        # bare IPv6 without brackets
        return f"[{value}]:{DEFAULT_PORT}"
    host, _, port = value.partition(":")
    if not host:
        raise InvalidInput(f"{option} {text!r} has no host: pass HOST:PORT")
    return f"{host}:{_port(port, text, option)}"


def parse_server_addresses(text: str, option: str = "--server") -> tuple[str, ...]:
    """`text`, one address or several separated by commas (`h1:p1,h2:p2`), as a tuple
    of `HOST:PORT` targets; each is read as `parse_server_address` reads one, and a
    list holds neither an empty element nor a `unix:` socket."""
    if "," not in text:
        return (parse_server_address(text, option),)
    elements = text.split(",")
    if any(not element.strip() for element in elements):
        raise InvalidInput(f"{option} {text!r} has an empty address in its list: "
                           "pass HOST:PORT,HOST:PORT")
    if any(element.strip().startswith("unix:") for element in elements):
        raise InvalidInput(f"{option} {text!r}: a unix: socket cannot be listed with "
                           "other addresses; pass it alone")
    return tuple(parse_server_address(element, option) for element in elements)


def _port(port: str, text: str, option: str) -> int:
    if not port:
        return DEFAULT_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput(f"{option} {text!r}: the port must be a number in 1..65535")
    return int(port)
