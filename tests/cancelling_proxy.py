"""A gRPC proxy on loopback in front of a real envad server that ends chosen calls with
CANCELLED and forwards every other call as it is: what a gateway, or a server that
stops mid-call, can do to a client. Every method of the envad service is forwarded by
its streaming kind, read from the service's descriptor; messages travel as bytes."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc

from envad.v1 import envad_pb2


class CancellingProxy:
    """`address` forwards to `target`; the first `cancel_first` calls of `method`
    (e.g. "Ingest") are answered CANCELLED without reaching the server."""

    def __init__(self, target: str, method: str, cancel_first: int):
        self.cancelled = 0
        self._lock = threading.Lock()
        self._method, self._left = method, cancel_first
        self._channel = grpc.insecure_channel(target)
        self._server = grpc.server(futures.ThreadPoolExecutor(8))
        self._server.add_generic_rpc_handlers((_Forwarding(self),))
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def should_cancel(self, method: str) -> bool:
        with self._lock:
            if method != self._method or self._left == 0:
                return False
            self._left -= 1
            self.cancelled += 1
            return True

    def close(self) -> None:
        self._server.stop(0).wait()
        self._channel.close()


class _Forwarding(grpc.GenericRpcHandler):
    def __init__(self, proxy: CancellingProxy):
        self.proxy = proxy
        self.kinds = {}
        for service in envad_pb2.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                self.kinds[f"/{service.full_name}/{m.name}"] = (
                    m.client_streaming, m.server_streaming)

    def service(self, handler_call_details):
        path = handler_call_details.method
        if path not in self.kinds:
            return None
        streams_in, streams_out = self.kinds[path]
        channel, name = self.proxy._channel, path.rsplit("/", 1)[-1]

        def metadata(context):
            return tuple((k, v) for k, v in context.invocation_metadata()
                         if not k.startswith("grpc-"))

        def forward(request, context):
            if self.proxy.should_cancel(name):
                context.abort(grpc.StatusCode.CANCELLED, "")
            call = {(False, False): channel.unary_unary, (True, False): channel.stream_unary,
                    (False, True): channel.unary_stream, (True, True): channel.stream_stream
                    }[(streams_in, streams_out)](path)
            remaining = context.time_remaining()     # None, or huge, without a deadline
            timeout = remaining if remaining is not None and remaining < 1e6 else None
            try:
                result = call(request, metadata=metadata(context), timeout=timeout)
                if streams_out:
                    yield from result
                else:
                    yield result
            except grpc.RpcError as exc:
                context.abort(exc.code(), exc.details() or "")

        if streams_out:
            handler = forward
        else:
            def handler(request, context):
                return next(iter(forward(request, context)))
        make = {(False, False): grpc.unary_unary_rpc_method_handler,
                (True, False): grpc.stream_unary_rpc_method_handler,
                (False, True): grpc.unary_stream_rpc_method_handler,
                (True, True): grpc.stream_stream_rpc_method_handler}[(streams_in, streams_out)]
        return make(handler)
