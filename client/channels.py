"""The client's gRPC channels: one target for one or several server addresses, gRPC's
round-robin load balancing over them, and gRPC's own retries of the idempotent calls.

Several addresses become one `ipv4:` (or `ipv6:`) target (gRPC's naming: a fixed list of
IP addresses), their host names resolved when the channel is made; one address stays the
target it is, so a DNS name with several addresses is balanced over all of them and
followed by gRPC's DNS resolver. `round_robin` sends each call to the next replica that
is connected; a replica that goes away is left out until it answers again.

gRPC re-sends the calls named in `RETRIED_BY_GRPC` (they read, or store idempotently by
id) on the status codes of the client's RetryPolicy, to whichever replica is next, so a
call that met a replica's loss, its drain or its start-up is answered by another. The
writes are retried by the client's own loop instead (envad.client.retry says why).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from pathlib import Path

import grpc

from envad.client.retry import RetryPolicy
from envad.defaults import SERVICE_NAME
from envad.errors import InvalidInput, Unavailable

#: (service, methods) that gRPC itself re-sends: reads, and Score, whose `store` is
#: idempotent by id. ScoreStream too: gRPC re-sends a stream only until its first
#: response arrives, so a stream is never answered twice.
RETRIED_BY_GRPC: tuple[tuple[str, tuple[str, ...]], ...] = (
    (SERVICE_NAME, ("Score", "ScoreStream", "Search", "Export", "Embed", "GetInfo",
                    "ListModels")),
    ("grpc.health.v1.Health", ("Check",)),
)
#: gRPC caps a retry policy's attempts at 5 (gRFC A6); a larger max_attempts counts only
#: in the client's own loop
GRPC_MAX_ATTEMPTS = 5
_MAX_SEND_BYTES = 64 * 1024 * 1024
_CHANNEL_OPTIONS: list[tuple[str, int | str]] = [
    ("grpc.max_send_message_length", _MAX_SEND_BYTES),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.enable_retries", 1),
    # gRPC can re-send a call only while its request fits in this buffer (default 256
    # KiB): as large as the largest request, so a Score of many images is re-sent too
    ("grpc.per_rpc_retry_buffer_size", _MAX_SEND_BYTES),
    # a replica that went away is tried again at least every 2 s (gRPC's default backoff
    # grows to 120 s), so it takes calls again soon after it is back
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def service_config(retry: RetryPolicy) -> str:
    """The channel's service config (JSON): round_robin, and `retry` as gRPC's retry
    policy of the RETRIED_BY_GRPC calls (none when `retry` makes a single attempt).
    gRPC jitters each wait by +-20% whatever `retry.jitter` says."""
    config: dict = {"loadBalancingConfig": [{"round_robin": {}}]}
    if retry.max_attempts > 1 and retry.retry_codes:
        names = [{"service": service, "method": method}
                 for service, methods in RETRIED_BY_GRPC for method in methods]
        config["methodConfig"] = [{"name": names, "retryPolicy": {
            "maxAttempts": min(retry.max_attempts, GRPC_MAX_ATTEMPTS),
            "initialBackoff": _duration(retry.initial_backoff),
            "maxBackoff": _duration(max(retry.max_backoff, retry.initial_backoff)),
            "backoffMultiplier": retry.multiplier,
            "retryableStatusCodes": sorted(retry.retry_codes),
        }}]
    return json.dumps(config)


def _duration(seconds: float) -> str:
    """`seconds` as a service config duration; gRPC wants waits above zero."""
    return f"{max(seconds, 0.001):.3f}s"


def channel_target(addresses: Sequence[str]) -> str:
    """The gRPC target of parsed `HOST:PORT` addresses (envad.client.address): one as it
    is, several as one `ipv4:` list (`ipv6:` when some listed host has no IPv4 address),
    every address of every listed name included."""
    if len(addresses) == 1:
        return addresses[0]
    resolved = [_resolve(address) for address in addresses]
    for scheme, family in (("ipv4", 0), ("ipv6", 1)):
        if all(found[family] for found in resolved):
            unique = dict.fromkeys(a for found in resolved for a in found[family])
            return f"{scheme}:{','.join(unique)}"
    raise InvalidInput(f"--server {','.join(addresses)} mixes hosts that have only IPv4 "
                       "and hosts that have only IPv6 addresses: gRPC balances over one "
                       "family; list addresses of one")


def _resolve(address: str) -> tuple[list[str], list[str]]:
    """(IPv4 targets, IPv6 targets) of one `HOST:PORT` (an IP address stays itself)."""
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise Unavailable(f"--server: cannot resolve {host!r}: {exc.strerror}") from None
    v4 = [f"{info[4][0]}:{port}" for info in infos if info[0] == socket.AF_INET]
    v6 = [f"[{info[4][0]}]:{port}" for info in infos if info[0] == socket.AF_INET6]
    return v4, v6


def _read_pem(value: str | bytes | Path | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def make_channel(
    address: str | Sequence[str],
    tls: bool = False,
    root_certificates: str | bytes | Path | None = None,
    client_certificate: str | bytes | Path | None = None,
    client_key: str | bytes | Path | None = None,
    server_name: str | None = None,
    retry: RetryPolicy = RetryPolicy(),
) -> grpc.Channel:
    """An insecure or TLS (optionally mutual-TLS) channel to `address`: parsed
    `HOST:PORT` addresses, a sequence or one string joined by commas. With several, the
    TLS certificates are checked against the first host's name (or `server_name`)."""
    addresses = address.split(",") if isinstance(address, str) else list(address)
    options = [*_CHANNEL_OPTIONS, ("grpc.service_config", service_config(retry))]
    if len(addresses) > 1:   # the name TLS checks, not the list of IPs the target holds
        options.append(("grpc.default_authority", server_name or addresses[0]))
    target = channel_target(addresses)
    if not tls:
        return grpc.insecure_channel(target, options=options)
    if (client_certificate is None) != (client_key is None):
        raise InvalidInput("mutual TLS needs both a client certificate and a client key")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read_pem(root_certificates),
        private_key=_read_pem(client_key),
        certificate_chain=_read_pem(client_certificate),
    )
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    return grpc.secure_channel(target, credentials, options=options)
