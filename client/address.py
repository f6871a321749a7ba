"""`--server` addresses: HOST[:PORT] with a default port, and a clear refusal of URLs.

gRPC targets are `HOST:PORT`; a bare host would otherwise be sent to port 443 by the
resolver, and `http://host:port` fails deep inside gRPC with an obscure message.
"""

from __future__ import annotations

import re

from envad.defaults import DEFAULT_ADDRESS, DEFAULT_PORT
from envad.errors import InvalidInput

__all__ = ["DEFAULT_PORT", "parse_server_address"]
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def parse_server_address(text: str) -> str:
    """`text` as a gRPC `HOST:PORT` target; the port defaults to DEFAULT_PORT.

    Accepts `host`, `host:port`, `[v6]`, `[v6]:port` and `unix:PATH`; a URL
    (`http://...`, `grpc://...`) or a bad port raises InvalidInput naming the fix.
    """
    value = text.strip()
    scheme = _SCHEME.match(value)
    if scheme:
        rest = value[scheme.end():].split("/", 1)[0]
        tls = " and --tls" if scheme.group(1).lower() in ("https", "grpcs") else ""
        raise InvalidInput(f"--server takes HOST:PORT, not a URL: use --server "
                           f"{rest or 'HOST:PORT'}{tls} instead of {text!r}")
    if not value:
        raise InvalidInput(f"--server is empty: pass HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    if value.startswith("unix:"):
        return value
    if value.startswith("["):                       # [IPv6] or [IPv6]:port
        host, _, port = value[1:].partition("]")
        port = port[1:] if port.startswith(":") else port
        return f"[{host}]:{_port(port, text)}"
    if value.count(":") > 1:                        # bare IPv6 without brackets
        return f"[{value}]:{DEFAULT_PORT}"
    host, _, port = value.partition(":")
    if not host:
        raise InvalidInput(f"--server {text!r} has no host: pass HOST:PORT")
    return f"{host}:{_port(port, text)}"


def _port(port: str, text: str) -> int:
    if not port:
        return DEFAULT_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput(f"--server {text!r}: the port must be a number in 1..65535")
    return int(port)
