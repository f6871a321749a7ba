"""Roles of servers sharing one store on object storage (`envad serve --role`).

One writer takes every write (Ingest, Fit, SetLabel, ActivateModel, ResetCameraStats,
Score with `store`); readers serve the rest and follow what the writer stores
(engine.refresh). The writer holds a lease object under the data URI, renewed at every
refresh: a second writer on the same URI refuses to start and names the first, and a
writer that finds another holder in the lease stops taking writes (docs/scaling.md).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid

import grpc

from envad.defaults import SERVICE_NAME
from envad.errors import FailedPrecondition
from envad.server.config import ServerConfig
from envad.server.interceptors import refused_unread
from envad.server.remote_dir import RemoteDir

log = logging.getLogger(__name__)
#: the RPCs that change what is stored: only a server that takes writes serves them
WRITE_METHODS = frozenset(f"/{SERVICE_NAME}/{name}" for name in (
    "Ingest", "Fit", "SetLabel", "ActivateModel", "ResetCameraStats"))
LEASE_NAME = "writer.lease"
#: a lease whose holder has not renewed it for this long (or 5 refreshes, if longer) is
#: taken over by the next writer that starts
LEASE_STALE_SECONDS = 30.0
#: the pauses before each read again of a lease that does not parse. The holder rewrites
#: the lease at every refresh, and pyarrow reads an object by asking its size, then its
#: bytes: a rewrite in between gives one version's bytes cut at the other's size (about
#: 1 read in 10 against an S3 emulator while another thread rewrites it without pause).
#: Only a lease that stays damaged this long (1.55 s) names nobody.
LEASE_REREAD_PAUSES = (0.05, 0.1, 0.2, 0.4, 0.8)


def takes_writes(config: ServerConfig) -> bool:
    return config.role != "reader"


def writer_lease(config: ServerConfig) -> WriterLease | None:
    """The lease a server that writes to a store on object storage must hold (None for
    a reader, or a local data dir: one process owns a local folder)."""
    if not config.remote or not takes_writes(config):
        return None
    return WriterLease(RemoteDir(str(config.data_dir), config.storage_options), config)


def reader_refusal(config: ServerConfig) -> str:
    """Why a reader refuses a write, naming where writes go."""
    writer = (f"the writer at {config.writer_address} (`--writer "
              f"{config.writer_address}`)" if config.writer_address
              else "the writer of this store")
    return (f"this server is a reader of {config.data_dir}: it serves Score, ScoreStream, "
            f"Search, Export, Embed, GetInfo and ListModels; send writes to {writer}")


class WriterLease:
    """The lease object `<data URI>/writer.lease`: who writes, renewed at each refresh."""

    def __init__(self, remote: RemoteDir, config: ServerConfig):
        self.remote = remote
        self.identity = config.writer_address
        self.holder = uuid.uuid4().hex
        self.stale_seconds = max(LEASE_STALE_SECONDS, 5 * config.refresh_seconds)
        self.lost = ""              # why writes stopped: another writer took the lease
        self._lock = threading.Lock()

    def _read(self) -> dict | None:
        """The lease, or None when there is none or it stays damaged (taken over)."""
        for pause in (*LEASE_REREAD_PAUSES, None):
            data = self.remote.read_bytes(LEASE_NAME)
            if data is None:
                return None
            try:
                lease = json.loads(data)
            except ValueError:      # read while it was rewritten, or damaged
                if pause is not None:
                    time.sleep(pause)
                continue
            return lease if isinstance(lease, dict) else None
        return None

    def _write(self) -> None:
        self.remote.write_bytes(LEASE_NAME, json.dumps({
            "holder": self.holder, "identity": self.identity, "pid": os.getpid(),
            "host": socket.gethostname(), "heartbeat": time.time()}).encode())

    def _held_by_another(self, lease: dict | None) -> bool:
        """Whether `lease` names another live writer (not this one, not an earlier
        process of this writer's identity, not stale)."""
        if lease is None or lease.get("holder") == self.holder:
            return False
        if lease.get("identity") == self.identity:      # this writer, restarted
            return False
        return time.time() - float(lease.get("heartbeat", 0)) < self.stale_seconds

    def _describe(self, lease: dict) -> str:
        age = time.time() - float(lease.get("heartbeat", 0))
        return (f"writer {lease.get('identity')} (pid {lease.get('pid')} on "
                f"{lease.get('host')}, renewed {age:.0f} s ago)")

    def check(self, port: int) -> None:
        """FailedPrecondition naming the writer that holds the lease, if another does
        (`envad serve` checks before it loads the engine: the refusal is one line)."""
        self.identity = self.identity or f"{socket.gethostname()}:{port}"
        lease = self._read()
        if self._held_by_another(lease):
            assert lease is not None
            raise FailedPrecondition(
                f"{self.remote.uri} already has a {self._describe(lease)}: one writer per "
                f"store; stop it, start this server with --role reader, or wait "
                f"{self.stale_seconds:.0f} s after that writer stopped")

    def acquire(self, port: int) -> None:
        """Take the lease, or FailedPrecondition naming the writer that holds it. Written,
        then read back: of two writers starting at once, the one overwritten refuses.
        The writer's identity is its `writer_address`, else this host and `port`: a
        writer restarted under the same identity takes its own lease back at once."""
        self.check(port)
        self._write()
        time.sleep(0.2)
        lease = self._read()
        if lease is None or lease.get("holder") != self.holder:
            raise FailedPrecondition(
                f"another writer took {self.remote.uri}'s lease while this one started: "
                f"{self._describe(lease or {})}; one writer per store")
        log.info("writer lease of %s taken as %s", self.remote.uri, self.identity)

    def renew(self) -> None:
        """At each refresh: renew the lease, or note that another writer holds it now
        (this server then refuses writes; `lost` says why)."""
        with self._lock:
            if self.lost:
                return
            lease = self._read()
            if lease is not None and lease.get("holder") != self.holder:
                self.lost = (f"this server no longer holds {self.remote.uri}'s writer lease "
                             f"({self._describe(lease)} took it): it refuses writes; "
                             "restart it to take the lease back when that writer stopped")
                log.error("%s", self.lost)
                return
            self._write()

    def release(self) -> None:
        """At shutdown: drop the lease if it is still this server's."""
        with self._lock:
            lease = self._read()
            if lease is not None and lease.get("holder") == self.holder:
                self.remote.delete(LEASE_NAME)


class RoleGate(grpc.ServerInterceptor):
    """Refuses the write RPCs, before reading their requests, with FAILED_PRECONDITION
    on a reader (naming the writer) and on a writer that lost its lease."""

    def __init__(self, config: ServerConfig, lease: WriterLease | None):
        self._reader = not takes_writes(config)
        self._refusal = reader_refusal(config)
        self._lease = lease

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method not in WRITE_METHODS:
            return handler
        if self._reader:
            return refused_unread(handler, FailedPrecondition(self._refusal))
        if self._lease is not None and self._lease.lost:
            return refused_unread(handler, FailedPrecondition(self._lease.lost))
        return handler
