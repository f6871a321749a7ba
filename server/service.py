"""The gRPC servicer: each method translates protobuf -> engine call -> protobuf.

Request defaults are resolved by the converters from the server config, and every
response is built by a converter, so a method is two or three lines.
"""

from __future__ import annotations

from envad.errors import EnvadError
from envad.server import convert
from envad.server.config import ServerConfig
from envad.server.engine import Engine
from envad.server.errors import abort_on_error
from envad.server.prefetch import prefetched
from envad.v1 import envad_pb2_grpc as pb_grpc


class AnomalyServicer(pb_grpc.AnomalyServiceServicer):
    """envad.v1.AnomalyService on top of an Engine."""

    def __init__(self, engine: Engine, config: ServerConfig):
        self.engine = engine
        self.config = config

    @abort_on_error
    def Score(self, request, context):
        options = convert.score_options_from_pb(request, self.config)
        return convert.score_to_pb(self.engine.score(convert.images_from_pb(request.images),
                                                     options))

    @abort_on_error
    def ScoreStream(self, request_iterator, context):
        for position, request in enumerate(request_iterator):
            try:   # a refused request is answered in the stream; the stream goes on
                options = convert.score_options_from_pb(request, self.config)
                outcome = self.engine.score(convert.images_from_pb(request.images), options,
                                            all_bad_is_error=False)
            except EnvadError as exc:
                yield convert.stream_error_to_pb(position, exc)
                continue
            yield convert.score_to_pb(outcome)

    @abort_on_error
    def Embed(self, request, context):
        outcome = self.engine.embed(convert.images_from_pb(request.images), request.model_id)
        return convert.embed_to_pb(outcome)

    @abort_on_error
    def Ingest(self, request_iterator, context):
        chunks = (convert.ingest_chunk_from_pb(r) for r in request_iterator)
        return convert.ingest_summary_to_pb(self.engine.ingest(chunks))

    @abort_on_error
    def Search(self, request, context):
        query = convert.search_query_from_pb(request, self.config)
        return convert.search_to_pb(self.engine.search(query))

    @abort_on_error
    def Fit(self, request, context):
        options = convert.fit_options_from_pb(request, self.config)
        return convert.fit_to_pb(self.engine.fit(options))

    @abort_on_error
    def Export(self, request, context):
        outcome = self.engine.export(convert.export_options_from_pb(request))
        yield from prefetched(convert.export_chunks_to_wire(outcome, request.format),
                              name="export")

    @abort_on_error
    def ListModels(self, request, context):
        return convert.model_list_to_pb(self.engine.list_models())

    @abort_on_error
    def ActivateModel(self, request, context):
        return convert.activation_to_pb(self.engine.activate(request.model_id))

    @abort_on_error
    def ResetCameraStats(self, request, context):
        envs = convert.reset_envs_from_pb(request)
        return convert.camera_stats_reset_to_pb(self.engine.reset_camera_stats(envs))

    @abort_on_error
    def SetLabel(self, request, context):
        return convert.label_to_pb(self.engine.set_label(list(request.ids), request.label))

    @abort_on_error
    def GetInfo(self, request, context):
        return convert.server_info_to_pb(self.engine.info())
