"""LocalServer: a child `envad serve` that is started, waited for and always stopped."""

from __future__ import annotations

import shutil

import pytest

from envad.client import EnvadClient
from envad.client.server_process import LocalServer
from envad.errors import Unavailable


def test_start_serve_stop(tmp_path, tiny_model_path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_model_path, models / "tiny.onnx")
    with LocalServer(tmp_path / "data", models, log_path=tmp_path / "server.log") as server:
        assert server.port > 0
        with EnvadClient(server.address) as client:
            assert client.info().active_model.model_id == "tiny-test"
    assert server.process is not None
    log = (tmp_path / "server.log").read_text()
    assert server.process.returncode == 0, log  # SIGTERM: graceful drain, exit code 0
    assert "envad serving on" in log


def test_a_server_that_cannot_start_is_reported(tmp_path) -> None:
    (tmp_path / "models").write_text("a file where the models folder should be")
    server = LocalServer(tmp_path / "data", tmp_path / "models")
    with pytest.raises(Unavailable, match="exited with code"):
        server.start(timeout=60)
    assert server.stop() != 0
