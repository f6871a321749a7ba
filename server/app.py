"""`serve()`: wire config, engine, gRPC server, health, reflection, metrics, shutdown.

Health: the overall service ("") is SERVING as soon as the process answers;
`envad.v1.AnomalyService` is NOT_SERVING until an encoder, its store and its index are
loaded, and both are NOT_SERVING during shutdown. On SIGTERM/SIGINT the server refuses
new RPCs (UNAVAILABLE) and drains in-flight ones for up to `grace_seconds`, health still
answering, then stops.

Streaming calls hold a handler thread each: at most `stream_limit` of them run at once
and an idle one ends after `stream_idle_seconds` (stream_limits.py), so the other
threads always answer unary calls and health. The port is never shared: a second server
on a port in use exits with one line naming it.
"""

from __future__ import annotations

import errno
import faulthandler
import logging
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from envad import __version__
from envad.defaults import SERVICE_NAME
from envad.server.config import ServerConfig
from envad.server.engine import Engine
from envad.server.freed_memory import return_freed_memory
from envad.server.interceptors import (
    BearerTokenInterceptor,
    DrainGate,
    ObserveInterceptor,
    ParseGuardInterceptor,
    PreSerializedResponses,
    log_observer,
    metrics_observer,
)
from envad.server.logs import configure_logging
from envad.server.metrics import ServerMetrics
from envad.server.ports import refuse_port_in_use
from envad.server.roles import RoleGate, WriterLease, writer_lease
from envad.server.service import AnomalyServicer
from envad.server.stream_limits import StreamGate
from envad.server.worker_pool import HandlerPool
from envad.v1 import envad_pb2_grpc

log = logging.getLogger("envad.server")
#: After the drain, what gRPC's own stop waits for calls still unfinished (seconds).
FINAL_GRACE_SECONDS = 1.0
#: Beyond the drain, how long a shutdown may take before the threads' stacks are logged.
SHUTDOWN_STALL_SECONDS = 15.0
#: health name of the service's writes (Ingest, Fit, SetLabel, Score with store):
#: NOT_SERVING while the store refuses them (a damaged table awaiting restore)
WRITES_NAME = SERVICE_NAME + ".writes"


@dataclass
class RunningServer:
    """Handle of a started server (used by `serve` and by in-process tests)."""

    server: grpc.Server
    engine: Engine
    health: health.HealthServicer
    port: int
    stop_event: threading.Event
    gate: DrainGate
    pool: HandlerPool | None = None          # the handlers' threads
    refresher: threading.Thread | None = None
    streams: StreamGate | None = None         # the bound and idle deadline of streams
    lease: WriterLease | None = None          # a writer's lease on a shared store
    # held while the service's health is set: once `stop` has set NOT_SERVING, a refresh
    # pass that was under way cannot set SERVING again
    health_lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self, grace: float | None = None) -> None:
        """NOT_SERVING first; new RPCs are refused (UNAVAILABLE) while the ones in flight
        finish, for up to `grace` s, with health still answering; then stop.

        The engine closes only after every handler has returned (gRPC's stop does not
        wait for them) and the refresh loop has finished its last pass, so neither a
        late handler nor a refresh (which saves indexes and reads the store) runs
        alongside the close (which saves them too)."""
        with self.health_lock:
            self.stop_event.set()
            for name in (SERVICE_NAME, WRITES_NAME, ""):
                self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if grace:
            self.gate.drain(grace)
        self.server.stop(FINAL_GRACE_SECONDS if grace else grace).wait()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        if self.streams is not None:
            self.streams.close()
        if self.refresher is not None:
            self.refresher.join()
        self.engine.close()
        if self.lease is not None:
            try:
                self.lease.release()
            except Exception:   # the next writer takes a stale lease over
                log.exception("releasing the writer lease failed")


def grpc_options(config: ServerConfig) -> list[tuple[str, int]]:
    limit = config.max_message_mb * 1024 * 1024
    return [("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            # gRPC shares a port by default (SO_REUSEPORT): a second server on it would
            # take half the connections, with a store of its own
            ("grpc.so_reuseport", 0)]


def start(config: ServerConfig) -> RunningServer:
    """Build and start the server; returns once it listens."""
    refuse_port_in_use(config.host, config.port)
    metrics = ServerMetrics()
    engine = Engine(config, metrics)
    gate = DrainGate()
    streams = StreamGate(config.stream_limit, config.stream_idle_seconds)
    lease = writer_lease(config)
    interceptors: list[grpc.ServerInterceptor] = [
        gate,
        RoleGate(config, lease),
        ParseGuardInterceptor(),
        ObserveInterceptor(metrics_observer(metrics)),
        ObserveInterceptor(log_observer(logging.getLogger("envad.access"))),
        # inside the observers, so that refused and idle streams are counted and logged
        streams,
        PreSerializedResponses([f"/{SERVICE_NAME}/Export"])]
    if config.auth_token:
        interceptors.insert(0, BearerTokenInterceptor(config.auth_token))
    pool = HandlerPool(config.workers, thread_name_prefix="rpc")
    pool.start_threads()
    server = grpc.server(pool, interceptors=interceptors, options=grpc_options(config))
    envad_pb2_grpc.add_AnomalyServiceServicer_to_server(AnomalyServicer(engine, config), server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_servicer.set(SERVICE_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
    health_servicer.set(WRITES_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    port = _listen_as(server, config, streams, lease)
    server.start()
    if config.metrics_port:
        metrics.serve(config.metrics_port, config.metrics_host)
    running = RunningServer(server, engine, health_servicer, port, threading.Event(), gate,
                            pool, streams=streams, lease=lease)
    log.info("listening", extra={"address": f"{config.host}:{port}", "version": __version__,
                                 "data_dir": str(config.data_dir),
                                 "models_dir": str(config.resolved_models_dir)})
    engine.start()
    gate.open()
    _set_health(running)
    running.refresher = threading.Thread(target=_refresh_loop, args=(running, metrics),
                                         name="refresh", daemon=True)
    running.refresher.start()
    return running


def _listen_as(server: grpc.Server, config: ServerConfig, streams: StreamGate,
               lease: WriterLease | None) -> int:
    """Bind the port, then take the writer lease of a shared store; the port, or the
    server closed and OSError (port) or FailedPrecondition (lease) raised."""
    try:
        port = _bind(server, config)
    except RuntimeError:    # grpcio raises "Failed to bind to address ..."
        port = 0
    if port == 0:
        streams.close()
        raise OSError(errno.EADDRNOTAVAIL,
                      f"cannot listen on {config.host}:{config.port}: the port is in use or "
                      f"the address is not this machine's; pick another with --port or "
                      f"--host")
    if lease is not None:
        try:
            lease.acquire(port)
        except Exception:
            server.stop(None)
            streams.close()
            raise
    return port


def _bind(server: grpc.Server, config: ServerConfig) -> int:
    address = f"{config.host}:{config.port}"
    if config.tls_cert_file:
        assert config.tls_key_file is not None      # load_config requires both
        credentials = grpc.ssl_server_credentials(
            [(Path(config.tls_key_file).read_bytes(), Path(config.tls_cert_file).read_bytes())])
        return server.add_secure_port(address, credentials)
    return server.add_insecure_port(address)


def _set_health(running: RunningServer) -> None:
    """The service's health from the engine's readiness, and its writes' from whether the
    store takes them, unless the server is stopping (then both stay NOT_SERVING, as
    `stop` set them)."""
    serving, not_serving = (health_pb2.HealthCheckResponse.SERVING,
                            health_pb2.HealthCheckResponse.NOT_SERVING)
    ready, writable = running.engine.ready, running.engine.writable
    if running.lease is not None and running.lease.lost:
        writable = False
    with running.health_lock:
        if not running.stop_event.is_set():
            running.health.set(SERVICE_NAME, serving if ready else not_serving)
            running.health.set(WRITES_NAME, serving if ready and writable else not_serving)


def _refresh_loop(running: RunningServer, metrics: ServerMetrics) -> None:
    interval = running.engine.config.refresh_seconds
    while not running.stop_event.wait(interval):
        try:
            return_freed_memory()
            if running.lease is not None:
                running.lease.renew()
            running.engine.refresh()
            _set_health(running)
            info = running.engine.info()
            if info.active_model is not None:
                metrics.observe_envs(info.active_model.model_id, info.env_counts)
        except Exception:  # keep refreshing; a bad model file must not stop the server
            log.exception("refresh failed")


def serve(config: ServerConfig) -> int:
    """Run the server until SIGTERM/SIGINT, then drain and exit (exit code 0)."""
    configure_logging(config.log_format, config.log_level)
    running = start(config)
    print(f"envad serving on {config.host}:{running.port}", flush=True)
    stop = threading.Event()

    def on_signal(signum, frame):
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # woken each second: a signal that lands on another thread (gRPC's, ONNX Runtime's)
    # runs its handler only once the main thread returns to Python, which a wait without
    # a timeout may never do
    while not stop.wait(1.0):
        pass
    # A shutdown that stalls (here or in the exit that follows) leaves every thread's stack
    # in the log before whoever waits for it gives up; a prompt exit ends the timer.
    faulthandler.dump_traceback_later(config.grace_seconds + SHUTDOWN_STALL_SECONDS)
    running.stop(config.grace_seconds)
    log.info("stopped")
    return 0
