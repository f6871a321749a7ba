"""The server's port is its own: `refuse_port_in_use` says in one line that another
process listens there, before anything heavy is loaded (`envad serve` calls it before it
imports the engine, and `app.start` again). gRPC's port sharing is off as well
(`grpc.so_reuseport` = 0, app.py), so a bind that races this check still fails."""

from __future__ import annotations

import errno
import socket


def refuse_port_in_use(host: str, port: int) -> None:
    """OSError (one line naming the port) when something listens on `host:port` already.

    gRPC would report it too, but as a C-core log line and a RuntimeError; this check
    says it plainly before anything is loaded (a bind in the moment between the check
    and gRPC's is still refused, by gRPC)."""
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host.strip("[]") or None, port,
                                       type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        return                      # gRPC says what is wrong with the host
    for family, kind, proto, _, address in addresses:
        try:
            probe = socket.socket(family, kind, proto)
        except OSError:
            continue                # e.g. no IPv6 here: gRPC skips it too
        with probe:
            # as gRPC binds: a port left in TIME_WAIT is free, a listening one is not
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise OSError(errno.EADDRINUSE, (
                        f"port {port} on {host} is already in use (another envad server or "
                        f"another program listens there); stop it or pick another port "
                        f"with --port or ENVAD_PORT")) from None
