"""Prometheus metrics of one server, on their own registry, served over HTTP."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class ServerMetrics:
    """Request counts and latency by RPC and status, batch sizes, rows, fit stats."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("envad_requests", "RPCs handled", ["method", "code"],
                                registry=self.registry)
        self.latency = Histogram("envad_request_seconds", "RPC latency", ["method"],
                                 registry=self.registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1,
                                          2.5, 5, 10, 30, 60))
        self.batch_size = Histogram("envad_batch_images", "images per ONNX Runtime call",
                                    registry=self.registry,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.rows_written = Counter("envad_rows_written", "rows written to the store",
                                    ["model_id"], registry=self.registry)
        self.rows_per_env = Gauge("envad_rows", "stored rows per environment",
                                  ["model_id", "env"], registry=self.registry)
        self.fit_seconds = Gauge("envad_detector_fit_seconds", "last fit time per detector",
                                 ["detector"], registry=self.registry)
        self.fit_samples = Gauge("envad_detector_fit_samples", "rows in the last fit",
                                 ["detector"], registry=self.registry)

    def observe_fit(self, bundle) -> None:
        for name, stats in bundle.stats.items():
            self.fit_seconds.labels(name).set(float(stats["fit_seconds"]))
            self.fit_samples.labels(name).set(int(stats["n_samples"]))

    def observe_envs(self, model_id: str, counts: dict[str, int]) -> None:
        for env, rows in counts.items():
            self.rows_per_env.labels(model_id, env).set(rows)

    def serve(self, port: int, host: str = "127.0.0.1"):
        """Start the /metrics HTTP endpoint; returns (server, thread)."""
        return start_http_server(port, addr=host, registry=self.registry)
