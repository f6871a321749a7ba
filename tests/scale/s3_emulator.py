"""Helpers of the object-storage tests: the bucket on moto's S3 server (conftest.py
starts it) and servers whose data dir is a URI on it."""

from __future__ import annotations

import io
import time
from pathlib import Path

import grpc
import numpy as np

from envad.client.server_process import LocalServer
from envad.server.remote_dir import RemoteDir
from server_handle import TEST_SETTINGS, InProcessServer, open_channel

BUCKET = "envad-test-store"
SECRET = "envad-secret-value-7f3a"


def listed(options: dict[str, str]) -> str:
    """Storage options as ENVAD_STORAGE_OPTIONS takes them."""
    return ",".join(f"{k}={v}" for k, v in options.items())


def local_models(tmp_path: Path, tiny_model_path: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    (models / tiny_model_path.name).write_bytes(tiny_model_path.read_bytes())
    return models


def in_process(uri: str, models: Path | str, cache: Path, options: dict[str, str],
               role: str = "all", **settings: str) -> InProcessServer:
    """An in-process server on `uri` in `role`, with `cache` as its local cache (and
    any other setting by name, e.g. writer_address)."""
    return InProcessServer(uri, models, extra_env={
        "ENVAD_STORAGE_OPTIONS": listed(options), "ENVAD_CACHE_DIR": str(cache),
        "ENVAD_ROLE": role, **{f"ENVAD_{k.upper()}": v for k, v in settings.items()}})


class UriServer(LocalServer):
    """`envad serve` as a subprocess on a data dir (and models dir) that may be URIs."""

    def __init__(self, uri: str, models: Path | str, cache: Path, options: dict[str, str]):
        super().__init__(cache, cache, env={**TEST_SETTINGS,
                                            "ENVAD_STORAGE_OPTIONS": listed(options)})
        self.uri, self.models, self.cache = uri, str(models), cache

    def channel(self) -> grpc.Channel:
        return open_channel(self.address)

    def serve_args(self) -> list[str]:
        return ["serve", "--host", self.host, "--port", str(self.port), "--data-dir", self.uri,
                "--models-dir", self.models, "--cache-dir", str(self.cache)]


def statistics_uploaded(remote: RemoteDir, rows: int, scores: bool, deadline: float) -> bool:
    """Poll until the bucket's camera statistics snapshot counts `rows` rows and, when
    the bundle adapts scores to cameras (`scores`), its score statistics are there (the
    Fit started them from the stored rows at once)."""
    while time.monotonic() < deadline:
        names = [n for n in remote.files() if n.endswith(".npz")]
        camera = [_counted(remote, n) for n in names if "-scores-" not in n]
        seeded = [_counted(remote, n) for n in names if "-scores-" in n]
        if camera == [rows] and (not scores or (seeded and seeded[0] > 0)):
            return True
        time.sleep(0.2)
    return False


def _counted(remote: RemoteDir, name: str) -> int:
    with np.load(io.BytesIO(remote.read_bytes(name) or b""), allow_pickle=False) as snapshot:
        return int(snapshot["counts"].sum())
