"""`envad info`'s next step (client/next_step.py) for each state of a server."""

from __future__ import annotations

from envad.client.next_step import next_step
from envad.client.results import BundleInfo, ModelInfo, RowFilter, ServerInfo


def info(model: bool, rows: int, bundle: bool) -> ServerInfo:
    meta = ModelInfo(model_id="m", file="m.onnx", sha256="s", input_size=32, embedding_dim=16,
                     algorithm="erm", training_envs=(), dataset="d", created="2026-01-01",
                     active=True) if model else None
    fitted = BundleInfo(bundle_id="b", model_id="m", detectors=("KNN",), n_samples=rows,
                        n_features=16, threshold=0.9, created="2026-01-01",
                        filter=RowFilter(), stats=(), space="l2") if bundle else None
    return ServerInfo(server_version="1", active_model=meta, bundle=fitted,
                      env_counts={"cam": rows} if rows else {}, total_rows=rows,
                      table_version=1, data_dir="/d", hint="no encoder yet: copy ...",
                      index_rows=rows)


def test_each_state_names_its_command() -> None:
    assert next_step(info(False, 0, False)) == "no encoder yet: copy ..."
    assert "`envad backfill FOLDER`" in next_step(info(True, 0, False))
    assert next_step(info(True, 10, False)).startswith("fit the detectors: `envad fit`")
    assert next_step(info(True, 10, True)).startswith("ready: `envad score")
