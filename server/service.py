"""The gRPC servicer: each method translates protobuf -> engine call -> protobuf."""

from __future__ import annotations

from envad.server import convert
from envad.server.engine import Engine
from envad.server.errors import abort_on_error
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc


class AnomalyServicer(pb_grpc.AnomalyServiceServicer):
    """envad.v1.AnomalyService on top of an Engine."""

    def __init__(self, engine: Engine):
        self.engine = engine

    @abort_on_error
    def Score(self, request, context):
        outcome = self.engine.score([convert.image_from_pb(i) for i in request.images],
                                    convert.score_options_from_pb(request))
        return convert.score_to_pb(outcome)

    @abort_on_error
    def ScoreStream(self, request_iterator, context):
        for request in request_iterator:
            outcome = self.engine.score([convert.image_from_pb(i) for i in request.images],
                                        convert.score_options_from_pb(request),
                                        all_bad_is_error=False)
            yield convert.score_to_pb(outcome)

    @abort_on_error
    def Embed(self, request, context):
        outcome = self.engine.embed([convert.image_from_pb(i) for i in request.images],
                                    request.model_id)
        return convert.embed_to_pb(outcome)

    @abort_on_error
    def Ingest(self, request_iterator, context):
        chunks = (convert.ingest_chunk_from_pb(r) for r in request_iterator)
        return convert.ingest_summary_to_pb(self.engine.ingest(chunks))

    @abort_on_error
    def Search(self, request, context):
        which = request.WhichOneof("query")
        hits, provenance = self.engine.search(
            image=request.image if which == "image" else None,
            vector=list(request.vector.values) if which == "vector" else None,
            row_id=request.id if which == "id" else None,
            k=request.k, row_filter=convert.filter_from_pb(request.filter))
        return convert.search_to_pb(hits, provenance)

    @abort_on_error
    def Fit(self, request, context):
        return convert.fit_to_pb(self.engine.fit(convert.fit_options_from_pb(request)))

    @abort_on_error
    def Export(self, request, context):
        batches, provenance = self.engine.export(convert.filter_from_pb(request.filter),
                                                 request.batch_size or 4096,
                                                 not request.without_vectors)
        as_rows = request.format == pb.EXPORT_FORMAT_ROWS
        for batch in batches:
            chunk = (pb.ExportChunk(rows=convert.rows_to_pb(batch)) if as_rows
                     else pb.ExportChunk(arrow_ipc=convert.arrow_ipc_to_pb(batch)))
            chunk.provenance.CopyFrom(convert.provenance_to_pb(provenance))
            yield chunk

    @abort_on_error
    def ListModels(self, request, context):
        return convert.model_list_to_pb(self.engine.list_models())

    @abort_on_error
    def ActivateModel(self, request, context):
        meta = self.engine.activate(request.model_id)
        return pb.ActivateModelResponse(
            model=convert.model_info_to_pb(meta),
            provenance=convert.provenance_to_pb(self.engine.provenance(self.engine.require_space())))

    @abort_on_error
    def ResetCameraStats(self, request, context):
        reset, provenance = self.engine.reset_camera_stats(request.envs)
        return pb.ResetCameraStatsResponse(reset=reset,
                                           provenance=convert.provenance_to_pb(provenance))

    @abort_on_error
    def GetInfo(self, request, context):
        return convert.server_info_to_pb(self.engine.info())
