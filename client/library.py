"""`EnvadClient`: the Python client of the envad.v1 AnomalyService.

One channel per client (thread-safe: share it between threads), balanced over the
server's replicas when there are several, and a second one to the writer when writes go
elsewhere. Every call has a deadline, transient failures (UNAVAILABLE,
RESOURCE_EXHAUSTED) are retried with exponential backoff within that deadline (by gRPC
for the idempotent calls, by envad.client.retry for the writes), results are typed
dataclasses (envad.client.results), and a failed call raises an envad exception
(envad.client.errors.from_rpc_error), never a raw grpc.RpcError.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.client import convert
from envad.client import results as r
from envad.client.address import parse_server_address, parse_server_addresses
from envad.client.channels import make_channel
from envad.client.errors import error_class_for, from_rpc_error
from envad.client.fit_options import FitSettings
from envad.client.retry import RetryPolicy, call_with_retry
from envad.defaults import DEFAULT_ADDRESS
from envad.errors import FailedPrecondition, InvalidInput, Unavailable
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc

T = TypeVar("T")

#: Image bytes packed into one Ingest message (gRPC's default receive limit is 4 MiB).
DEFAULT_MAX_MESSAGE_BYTES = 3 * 1024 * 1024


def default_address() -> str:
    """`$ENVAD_SERVER`, else envad.defaults.DEFAULT_ADDRESS."""
    return os.environ.get("ENVAD_SERVER") or DEFAULT_ADDRESS


def default_writer() -> str | None:
    """`$ENVAD_WRITER`, else None (writes go to the server's one address)."""
    return os.environ.get("ENVAD_WRITER") or None


class EnvadClient:
    """Client of an envad server or of its replicas; use as a context manager to close
    the channels.

    Parameters
    ----------
    address : "HOST[:PORT]" of the server, or several joined by commas
        ("h1:50051,h2:50051"), whose calls are spread round-robin and re-sent to another
        when one fails (default `$ENVAD_SERVER` or `envad.defaults.DEFAULT_ADDRESS`; the
        port defaults to `DEFAULT_PORT`; a URL raises InvalidInput).
    writer : "HOST[:PORT]" that takes the writes (Ingest, Fit, SetLabel, ActivateModel,
        ResetCameraStats, Score with store); default `$ENVAD_WRITER`, else `address`
        when it is one address. With several and no writer, a write raises
        FailedPrecondition before anything is sent.
    timeout : default deadline of a call in seconds, retries included (None: no limit).
    retry : backoff policy for UNAVAILABLE / RESOURCE_EXHAUSTED: gRPC's retry policy of
        the idempotent calls (at most 5 attempts), the client's loop for the writes.
    token : bearer token sent as `authorization: Bearer <token>` (default `$ENVAD_TOKEN`).
    tls, root_certificates, client_certificate, client_key, server_name : TLS settings;
        PEM bytes or file paths. Without root certificates the system roots are used.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        writer: str | None = None,
        timeout: float | None = 60.0,
        retry: RetryPolicy = RetryPolicy(),
        token: str | None = None,
        tls: bool = False,
        root_certificates: str | bytes | Path | None = None,
        client_certificate: str | bytes | Path | None = None,
        client_key: str | bytes | Path | None = None,
        server_name: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        addresses = parse_server_addresses(address or default_address())
        self.address = ",".join(addresses)
        writer = writer or default_writer()
        self.writer = (parse_server_address(writer, "--writer") if writer
                       else addresses[0] if len(addresses) == 1 else None)
        self.timeout = timeout
        self.retry = retry
        self.max_message_bytes = max_message_bytes
        token = token if token is not None else os.environ.get("ENVAD_TOKEN") or None
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()

        def channel(target: Sequence[str]) -> grpc.Channel:
            return make_channel(target, tls, root_certificates, client_certificate,
                                client_key, server_name, retry)

        self._channel = channel(addresses)
        self._writer_channel = (self._channel if self.writer in (None, self.address)
                                else channel([self.writer]))
        self._stub = pb_grpc.AnomalyServiceStub(self._channel)
        self._writes = pb_grpc.AnomalyServiceStub(self._writer_channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    # ------------------------------------------------------------ plumbing

    def __enter__(self) -> EnvadClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()
        if self._writer_channel is not self._channel:
            self._writer_channel.close()

    def check_writer(self, what: str) -> None:
        """FailedPrecondition (as a reader answers a write) when several servers are
        listed and none is named the writer: `what` writes, and writes are never spread
        over replicas."""
        if self.writer is None:
            raise FailedPrecondition(
                f"{what} writes, and --server lists {self.address.count(',') + 1} "
                "addresses: name the one writer with --writer HOST:PORT (or $ENVAD_WRITER; "
                "EnvadClient(writer=...))")

    def _writer_stub(self, method: str) -> pb_grpc.AnomalyServiceStub:
        self.check_writer(method)
        return self._writes

    def _call(self, method: str, invoke: Callable[[float | None], T], timeout: float | None,
              *, write: bool = False) -> T:
        """Run `invoke(remaining)` within the deadline, translating errors. gRPC re-sends
        the idempotent calls itself (envad.client.channels); a write goes through the
        client's retry loop (envad.client.retry says why)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout

        def attempt(remaining: float | None) -> T:
            if remaining is not None and remaining <= 0:
                raise from_rpc_error(_DeadlineError(), method)
            try:
                return invoke(remaining)
            except grpc.RpcError as exc:
                raise from_rpc_error(exc, method) from None

        if not write:
            return attempt(timeout)
        return call_with_retry(attempt, self.retry, deadline)

    def _unary(self, method: str, request, timeout: float | None):
        rpc = getattr(self._stub, method)
        return self._call(
            method, lambda t: rpc(request, timeout=t, metadata=self._metadata), timeout
        )

    def _write(self, method: str, request, timeout: float | None):
        rpc = getattr(self._writer_stub(method), method)
        return self._call(
            method, lambda t: rpc(request, timeout=t, metadata=self._metadata), timeout,
            write=True,
        )

    # ------------------------------------------------------------ health

    def health(self, service: str = "", timeout: float | None = 5.0) -> str:
        """The server's health status name for `service` ("" = the whole server)."""
        request = health_pb2.HealthCheckRequest(service=service)
        response = self._call(
            "Health.Check",
            lambda t: self._health.Check(request, timeout=t, metadata=self._metadata),
            timeout,
        )
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def wait_until_serving(self, timeout: float = 60.0, service: str = "") -> None:
        """Block until health reports SERVING; Unavailable after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                last = self.health(service, timeout=min(2.0, max(0.1, deadline - time.monotonic())))
                if last == "SERVING":
                    return
            except Unavailable as exc:
                last = str(exc)
            time.sleep(0.2)
        raise Unavailable(f"server {self.address} not SERVING after {timeout:.0f}s ({last})")

    # ------------------------------------------------------------ scoring

    def score(
        self,
        images: Sequence[r.ImageInput | bytes | str | Path],
        *,
        store: bool = False,
        split: str = "",
        label: str = "",
        threshold: float | None = None,
        top_k: int = 0,
        neighbor_filter: r.RowFilter | None = None,
        include_self: bool = False,
        include_known_anomalies: bool = False,
        reuse_stored: bool = False,
        per_item_errors: bool = False,
        timeout: float | None = None,
    ) -> r.ScoreResult:
        """Score a batch of images (ImageInput, raw bytes or file paths).

        Neighbours never include an image's own stored row (same id or content) nor rows
        labelled as known anomalies, unless `include_self` / `include_known_anomalies`.
        `reuse_stored`: an image stored under its id with the same content is scored from
        its stored embedding, not embedded again (re-scoring after a refit).
        `per_item_errors`: a batch none of whose images can be decoded comes back with
        each image's own error in its result instead of one INVALID_ARGUMENT joining
        them all (the request goes over ScoreStream, which answers so).
        """
        request = pb.ScoreRequest(
            images=[convert.image_to_pb(as_image(i)) for i in images],
            store=store,
            split=split,
            label=label,
            top_k=top_k,
            neighbor_filter=convert.filter_to_pb(neighbor_filter),
            include_self=include_self,
            include_known_anomalies=include_known_anomalies,
            reuse_stored=reuse_stored,
        )
        if threshold is not None:
            request.threshold = threshold
        # storing is a write: it goes to the writer (gRPC re-sends it: idempotent by id)
        stub = self._writer_stub("Score with store") if store else self._stub
        if not per_item_errors:
            return convert.score_result_from_pb(self._call(
                "Score", lambda t: stub.Score(request, timeout=t, metadata=self._metadata),
                timeout))

        def invoke(remaining: float | None) -> pb.ScoreResponse:
            (response,) = list(stub.ScoreStream(iter([request]), timeout=remaining,
                                                metadata=self._metadata))
            return response

        response = self._call("ScoreStream", invoke, timeout)
        if response.HasField("error"):
            raise error_class_for(response.error.code)(response.error.message)
        return convert.score_result_from_pb(response)

    def score_stream(
        self, batches: Iterable[Sequence[r.ImageInput]], timeout: float | None = None
    ) -> Iterator[r.ScoreResult]:
        """Score a stream of batches over one ScoreStream call (one result per batch, in
        order). Re-sent by gRPC only until its first result: a stream broken later, or a
        batch the server refused (its response's `error`: no images, a bad option),
        raises and the caller resumes."""
        requests = (
            pb.ScoreRequest(images=[convert.image_to_pb(as_image(i)) for i in batch])
            for batch in batches
        )
        timeout = self.timeout if timeout is None else timeout
        try:
            for response in self._stub.ScoreStream(
                requests, timeout=timeout, metadata=self._metadata
            ):
                if response.HasField("error"):
                    error = error_class_for(response.error.code)
                    raise error(f"ScoreStream batch {response.error.index}: "
                                f"{response.error.message}")
                yield convert.score_result_from_pb(response)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, "ScoreStream") from None

    def embed(
        self,
        images: Sequence[r.ImageInput | bytes | str | Path],
        model_id: str = "",
        timeout: float | None = None,
    ) -> r.EmbedResult:
        request = pb.EmbedRequest(
            images=[convert.image_to_pb(as_image(i)) for i in images], model_id=model_id
        )
        return convert.embed_result_from_pb(self._unary("Embed", request, timeout))

    # ------------------------------------------------------------ store

    def ingest(self, items: Sequence[r.IngestInput],
               timeout: float | None = None) -> r.IngestSummary:
        """Store items (idempotent by id) in one Ingest stream; the summary counts what
        became durable. Sent to the writer, and retried as a whole on transient failures
        (safe: idempotent)."""
        items = list(items)
        stub = self._writer_stub("Ingest")

        def invoke(remaining: float | None) -> pb.IngestSummary:
            requests = convert.ingest_requests(items, self.max_message_bytes)
            return stub.Ingest(requests, timeout=remaining, metadata=self._metadata)

        return convert.ingest_summary_from_pb(self._call("Ingest", invoke, timeout,
                                                         write=True))

    def search(
        self,
        *,
        image: bytes | None = None,
        vector: Sequence[float] | None = None,
        id: str | None = None,
        k: int = 10,
        row_filter: r.RowFilter | None = None,
        exclude_self: bool = False,
        exclude_known_anomalies: bool = False,
        timeout: float | None = None,
    ) -> r.SearchResult:
        """k nearest stored rows to exactly one of: an image, a vector, a stored id;
        optionally without the queried row/image itself and without known anomalies."""
        given = [x is not None for x in (image, vector, id)]
        if sum(given) != 1:
            raise InvalidInput("search needs exactly one of image=, vector=, id=")
        request = convert.search_request_to_pb(
            image=image, vector=vector, id=id, k=k, row_filter=row_filter
        )
        request.exclude_self = exclude_self
        request.exclude_known_anomalies = exclude_known_anomalies
        return convert.search_result_from_pb(self._unary("Search", request, timeout))

    def export(
        self,
        row_filter: r.RowFilter | None = None,
        *,
        batch_size: int = 0,
        with_vectors: bool = True,
        timeout: float | None = None,
    ):
        """Stream stored rows as pyarrow RecordBatches (Arrow IPC on the wire).

        `timeout` bounds the whole stream (default: none, exports can be long)."""
        request = pb.ExportRequest(
            filter=convert.filter_to_pb(row_filter),
            format=pb.EXPORT_FORMAT_ARROW_IPC,
            batch_size=batch_size,
            without_vectors=not with_vectors,
        )
        try:
            for chunk in self._stub.Export(request, timeout=timeout, metadata=self._metadata):
                yield from convert.export_chunk_from_pb(chunk, with_vectors)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, "Export") from None

    def export_parquet(
        self,
        path: str | Path,
        row_filter: r.RowFilter | None = None,
        *,
        with_vectors: bool = True,
        timeout: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Write the export to one Parquet file (atomically: temp file + rename); returns
        the number of rows."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial")
        writer = None
        rows = 0
        try:
            for batch in self.export(row_filter, with_vectors=with_vectors, timeout=timeout):
                if writer is None:
                    writer = pq.ParquetWriter(tmp, batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
                if progress is not None:
                    progress(batch.num_rows)
            if writer is None:  # no rows: still write a valid (empty) file

                pq.write_table(pa.table({"id": pa.array([], pa.string())}), tmp)
        finally:
            if writer is not None:
                writer.close()
        os.replace(tmp, path)
        return rows

    # ------------------------------------------------------------ detectors and models

    def fit(self, row_filter: r.RowFilter | None = None, settings: FitSettings | None = None,
            *, timeout: float | None = 3600.0, **fields: Any) -> r.FitResult:
        """Fit detectors on stored rows (empty filter: split "train") and, by default,
        activate the new bundle; `settings` says how (client/fit_options.py's FitSettings,
        whose help text says what each field means; None: the server's defaults).
        `fields`, a convenience: FitSettings fields that replace those of `settings`
        (`client.fit(train, detectors=("KNN",))`). The server refuses fewer than
        `envad.records.MIN_FIT_ROWS` rows (FailedPrecondition) unless `allow_few_rows`.
        Default deadline one hour (O(n^2) detectors are slow)."""
        settings = replace(settings or FitSettings(), **fields)
        request = pb.FitRequest(
            filter=convert.filter_to_pb(row_filter),
            detectors=list(settings.detectors),
            max_samples=settings.max_samples,
            contamination=settings.contamination,
            stylist=pb.StylistOptions(enabled=settings.stylist,
                                      drop_fraction=settings.drop_fraction),
            seed=settings.seed,
            no_activate=not settings.activate,
            space=settings.space,
            min_camera_rows=settings.min_camera_rows,
            allow_few_rows=settings.allow_few_rows,
            score_adaptation=settings.score_adaptation,
            event_gap_s=settings.event_gap_s,
        )
        return convert.fit_result_from_pb(self._write("Fit", request, timeout))

    def reset_camera_stats(self, envs: Sequence[str] = (), timeout: float | None = None
                           ) -> tuple[str, ...]:
        """Forget the running per-camera statistics of `envs` (all cameras when empty);
        returns the cameras that were forgotten."""
        request = pb.ResetCameraStatsRequest(envs=list(envs))
        return convert.camera_stats_reset_from_pb(
            self._write("ResetCameraStats", request, timeout)
        )

    def set_label(self, ids: Sequence[str], label: str, timeout: float | None = None
                  ) -> r.LabelResult:
        """Set the label of stored rows; "normal" and "anomaly" are the review labels a
        refit honours (docs/client.md, "Review loop"). Ids not stored come back in
        `missing`."""
        request = pb.SetLabelRequest(ids=list(ids), label=label)
        return convert.label_result_from_pb(self._write("SetLabel", request, timeout))

    def list_models(self, timeout: float | None = None) -> r.ModelList:
        response = self._unary("ListModels", pb.ListModelsRequest(), timeout)
        return convert.model_list_from_pb(response)

    def activate_model(self, model_id: str, timeout: float | None = None) -> r.ModelInfo:
        request = pb.ActivateModelRequest(model_id=model_id)
        return convert.model_info_from_pb(self._write("ActivateModel", request, timeout).model)

    def info(self, timeout: float | None = None) -> r.ServerInfo:
        return convert.server_info_from_pb(self._unary("GetInfo", pb.GetInfoRequest(), timeout))


def as_image(value: r.ImageInput | bytes | str | Path) -> r.ImageInput:
    """Accept an ImageInput, encoded bytes, or a file path."""
    if isinstance(value, r.ImageInput):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return r.ImageInput(data=bytes(value))
    if isinstance(value, (str, Path)):
        return r.ImageInput.from_path(value)
    raise InvalidInput(f"cannot use {type(value).__name__} as an image")


class _DeadlineError(grpc.RpcError):
    """Stands for a call that was never started because its deadline had passed."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return "deadline passed before the call started"
