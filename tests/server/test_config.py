"""Settings precedence: flags > ENVAD_* > TOML > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from envad.errors import InvalidInput
from envad.server.config import ServerConfig, describe, load_config


def test_defaults_are_embedded_under_var_envad():
    config = load_config(env={})
    assert config.data_dir == Path("var/envad") and config.port == 50051
    assert config.resolved_models_dir == Path("var/envad/models")
    assert config.lancedb_dir == Path("var/envad/lancedb")


def test_precedence(tmp_path):
    toml = tmp_path / "envad.toml"
    toml.write_text('[server]\nport = 6000\nmax_batch = 8\ndata_dir = "/srv/envad"\n')
    env = {"ENVAD_PORT": "7000", "ENVAD_MAX_WAIT_MS": "5.5"}
    config = load_config(config_file=toml, env=env, overrides={"port": 8000, "host": None})
    assert config.port == 8000                 # flag beats variable and file
    assert config.max_wait_ms == 5.5           # variable
    assert config.max_batch == 8               # file
    assert config.data_dir == Path("/srv/envad")
    assert config.host == "127.0.0.1"          # default (None override ignored)
    assert load_config(config_file=toml, env=env).port == 7000


def test_config_file_from_environment_and_errors(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("metrics_port = 9100\n")
    assert load_config(env={"ENVAD_CONFIG": str(toml)}).metrics_port == 9100
    toml.write_text("no_such_setting = 1\n")
    with pytest.raises(InvalidInput, match="no_such_setting"):
        load_config(config_file=toml, env={})
    with pytest.raises(InvalidInput, match="port"):
        load_config(env={"ENVAD_PORT": "eighty"})


def test_describe_lists_every_setting():
    names = {name for name, _, _ in describe()}
    assert names == set(ServerConfig.__dataclass_fields__)


def test_anomaly_labels_are_a_comma_separated_set():
    from envad.server.config import load_config

    config = load_config(env={"ENVAD_ANOMALY_LABELS": " anomaly, unknown-species,,anomaly"})
    assert config.anomaly_label_set == ("anomaly", "unknown-species")
    assert load_config(env={}).anomaly_label_set == ("anomaly",)


def test_streams_keep_handler_threads_for_unary_calls():
    """max_streams defaults to half the handler threads and must stay below them, so that
    unary calls and health always have a thread (server/stream_limits.py)."""
    assert load_config(env={}).stream_limit == 8
    assert load_config(env={"ENVAD_WORKERS": "6"}).stream_limit == 3
    assert load_config(env={"ENVAD_MAX_STREAMS": "15"}).stream_limit == 15
    assert load_config(env={"ENVAD_STREAM_IDLE_SECONDS": "2.5"}).stream_idle_seconds == 2.5
    with pytest.raises(InvalidInput, match="max_streams must be below workers"):
        load_config(env={"ENVAD_MAX_STREAMS": "16"})
    with pytest.raises(InvalidInput, match="workers must be at least 2"):
        load_config(env={"ENVAD_WORKERS": "1"})
    with pytest.raises(InvalidInput, match="stream_idle_seconds"):
        load_config(env={"ENVAD_STREAM_IDLE_SECONDS": "-1"})


def test_roles_other_than_all_need_a_shared_store():
    assert load_config(env={}).role == "all"
    reader = load_config(env={"ENVAD_ROLE": "reader", "ENVAD_DATA_DIR": "s3://b/p"})
    assert reader.role == "reader" and reader.remote
    with pytest.raises(InvalidInput, match="role writer shares a store on object storage"):
        load_config(env={"ENVAD_ROLE": "writer"})
    with pytest.raises(InvalidInput, match="role must be one of all, writer, reader"):
        load_config(env={"ENVAD_ROLE": "replica", "ENVAD_DATA_DIR": "s3://b/p"})
