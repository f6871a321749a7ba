# envad scoring service: the gRPC server only (ONNX Runtime, LanceDB, FAISS, pyod; no torch).
#   docker build -t envad .
#   docker run -p 50051:50051 -v $PWD/models:/models -v envad-data:/data envad
# Encoders (*.onnx, docs/model-format.md) go in /models; the store, detector bundles and
# state live in /data. Settings are ENVAD_* environment variables (see `envad serve --help`).

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY server ./server
COPY client ./client
COPY training ./training
RUN pip install --no-cache-dir --upgrade pip \
 && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
# the client and the [server] extra (ONNX Runtime, LanceDB, FAISS, pyod); the [train]
# extra (torch) is never installed in this image
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir "$(echo /wheels/envad-*.whl)[server]" \
 && rm -rf /wheels \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /data envad \
 && mkdir -p /data /models \
 && chown envad:envad /data /models

ENV ENVAD_HOST=0.0.0.0 \
    ENVAD_PORT=50051 \
    ENVAD_DATA_DIR=/data \
    ENVAD_MODELS_DIR=/models \
    ENVAD_LOG_FORMAT=json \
    PYTHONUNBUFFERED=1

USER envad
WORKDIR /data
VOLUME ["/models", "/data"]
EXPOSE 50051

# Liveness: the gRPC health service answers (readiness, i.e. an encoder is loaded, is
# `envad health` without --live).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD envad health --live --server "127.0.0.1:${ENVAD_PORT}" --timeout 5 || exit 1

ENTRYPOINT ["envad"]
CMD ["serve"]
