"""`envad serve`: run the scoring service.

`envad --help` imports this module to list the command: it loads the settings table
(config) and nothing else of the server; the rest waits for `envad serve`."""

from __future__ import annotations

import argparse
from pathlib import Path

from envad.server.config import ROLES, ServerConfig, describe, load_config


def register(subparsers) -> None:
    shown = ServerConfig()
    settings = "\n".join(f"  {name:<22} {env:<30} default {default}"
                         for name, env, default in describe())
    parser = subparsers.add_parser(
        "serve", help="run the gRPC scoring service",
        description="Run the envad gRPC service (embedded LanceDB store + FAISS index). "
                    "Settings: flags > ENVAD_* environment variables > TOML file (--config "
                    "or ENVAD_CONFIG, keys at top level or under [server]) > defaults.",
        epilog="all settings (TOML key, environment variable, default):\n" + settings,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help="TOML settings file")
    parser.add_argument("--host", help=f"address to bind (default {shown.host})")
    parser.add_argument("--port", type=int,
                        help=f"gRPC port (default {shown.port}; 0 = any free)")
    parser.add_argument("--data-dir",
                        help="store, bundles, state: a local path or a URI on object storage "
                             f"such as s3://bucket/prefix (default {shown.data_dir})")
    parser.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                        help="object-storage option of a URI data dir, as LanceDB takes it "
                             "(aws_endpoint, aws_region, allow_http, aws_access_key_id, "
                             "...); repeatable. The AWS_* variables are honoured too. "
                             "Values of secret keys are never logged")
    parser.add_argument("--cache-dir", type=Path,
                        help="local cache of a URI data dir (default var/envad-cache/...)")
    parser.add_argument("--models-dir",
                        help="ONNX encoders: a local path or a URI on object storage, "
                             "downloaded into the cache (default DATA_DIR/models)")
    parser.add_argument("--role", choices=ROLES,
                        help="'all' serves and writes (one process; the default); on a store "
                             "on object storage, one 'writer' takes Ingest, Fit, Label and "
                             "model activation, and any number of 'reader's serve Score, "
                             "Search, Export and Info, following the writer "
                             "(docs/scaling.md)")
    parser.add_argument("--writer-address", metavar="HOST:PORT",
                        help="a reader's writer: named in the refusal of a write sent to "
                             "the reader")
    parser.add_argument("--refresh-seconds", "--refresh-s", type=float,
                        help="how often new rows, bundles, models and camera statistics "
                             "stored by another process are picked up (default "
                             f"{shown.refresh_seconds:g})")
    parser.add_argument("--metrics-port", type=int, help="Prometheus /metrics port (0 = off)")
    parser.add_argument("--max-streams", type=int,
                        help="streaming calls (ScoreStream, Ingest, Export, ...) served at once; "
                             "one more is refused with RESOURCE_EXHAUSTED. Must be below "
                             "workers, whose other threads stay for unary calls and health "
                             f"(default {shown.max_streams} = workers // 2, i.e. "
                             f"{shown.stream_limit})")
    parser.add_argument("--stream-idle-seconds", type=float,
                        help="end a stream whose client sends no request for this long, with "
                             f"DEADLINE_EXCEEDED (default {shown.stream_idle_seconds:g}; "
                             "0 = never)")
    parser.set_defaults(func=run)


def run(args) -> int:
    # `envad --help` loads this module: of the server it loads only the settings table
    from envad.server.ports import refuse_port_in_use

    config = load_config(config_file=args.config, overrides={
        "host": args.host, "port": args.port, "data_dir": args.data_dir,
        "storage_options": args.storage_option, "cache_dir": args.cache_dir,
        "models_dir": args.models_dir, "metrics_port": args.metrics_port,
        "role": args.role, "writer_address": args.writer_address,
        "refresh_seconds": args.refresh_seconds,
        "max_streams": args.max_streams, "stream_idle_seconds": args.stream_idle_seconds,
    })
    # before the engine's imports (whose libraries log as they load): a wrong setting or
    # a port in use is one line on stderr
    refuse_port_in_use(config.host, config.port)
    # before the engine starts its threads, so that they share `malloc_arenas` heaps
    from envad.server.freed_memory import limit_malloc_arenas

    limit_malloc_arenas(config.malloc_arenas)
    check_storage(config)
    from envad.server.app import serve  # the engine: ONNX Runtime, LanceDB, FAISS ([server])

    return serve(config)


def check_storage(config: ServerConfig) -> None:
    """A data dir or models dir on object storage that cannot be reached (no such bucket,
    no answer at the endpoint, credentials refused) stops the start with one line naming
    it and what to check (FailedPrecondition, secrets hidden)."""
    uris = [u for u in (str(config.data_dir) if config.remote else None, config.models_uri)
            if u]
    if not uris:
        return
    # pyarrow's file systems: loaded only for a URI
    from envad.server.remote_dir import RemoteDir

    for uri in uris:
        RemoteDir(uri, config.storage_options).check()
    # the lease: pyarrow's file systems again, no more of the server
    from envad.server.roles import writer_lease

    lease = writer_lease(config)
    if lease is not None:
        lease.check(config.port)
