"""EnvadClient and the CLI with TLS and a bearer token against a real server."""

from __future__ import annotations

import shutil

import pytest

from envad.client import EnvadClient
from envad.client.cli import main
from envad.errors import Unauthenticated, Unavailable
from server_handle import ServerHandle, self_signed_certificate

TOKEN = "s3cret-token"


@pytest.fixture
def secure_server(tmp_path, tiny_model_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    key, cert = self_signed_certificate(tmp_path, "DNS:localhost,IP:127.0.0.1")
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_model_path, models / tiny_model_path.name)
    handle = ServerHandle(tmp_path / "data", models, extra_env={
        "ENVAD_TLS_CERT_FILE": str(cert), "ENVAD_TLS_KEY_FILE": str(key),
        "ENVAD_AUTH_TOKEN": TOKEN}).start(wait_service=False)
    yield handle, cert
    handle.stop()


def test_tls_and_token(secure_server, capsys) -> None:
    handle, cert = secure_server
    with EnvadClient(handle.address, tls=True, root_certificates=cert, token=TOKEN) as client:
        client.wait_until_serving(30)
        assert client.info().active_model.model_id == "tiny-test"
    with EnvadClient(handle.address, tls=True, root_certificates=cert, token="wrong") as client:
        with pytest.raises(Unauthenticated):
            client.info()
    with EnvadClient(handle.address, tls=True, root_certificates=str(cert)) as client:
        with pytest.raises(Unauthenticated):
            client.list_models()
    with EnvadClient(handle.address, timeout=3) as plain:  # no TLS: the handshake fails
        with pytest.raises(Unavailable):
            plain.info()
    code = main(["info", "--json", "--server", handle.address, "--tls", "--ca-cert", str(cert),
                 "--token", TOKEN])
    assert code == 0 and '"model_id": "tiny-test"' in capsys.readouterr().out
