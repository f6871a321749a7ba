"""ONNX export: the model format of docs/model-format.md, parity, server loading."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from envad.errors import FailedPrecondition, Internal
from envad.server.encoder import REQUIRED_KEYS, OnnxEncoder
from envad.server.images import decode_image
from envad.training import checkpoint as ckpt
from envad.training import export as export_module
from envad.training.data import load_folder
from envad.training.export import PARITY_TOLERANCE, export_onnx, parity_tolerance
from envad.training.models import to_float_nchw


@pytest.fixture(scope="module")
def exported(finished_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "model.onnx"
    return export_onnx(finished_run, out)


def test_graph_follows_the_model_format(exported):
    model = onnx.load(str(exported.path))
    onnx.checker.check_model(model)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 17
    (inp,), (out,) = model.graph.input, model.graph.output
    assert inp.name == "images" and inp.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    dims = inp.type.tensor_type.shape.dim
    assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [16, 16, 3]
    assert out.name == "embedding" and out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert out.type.tensor_type.shape.dim[1].dim_value == 512
    first_ops = [node.op_type for node in model.graph.node[:6]]
    assert first_ops[0] == "Cast" and "Div" in first_ops and "Transpose" in first_ops
    assert "Sub" in first_ops                                   # mean/std inside the graph


def test_metadata(exported, finished_run):
    entries = onnx.load(str(exported.path)).metadata_props
    props = {p.key: p.value for p in entries}
    assert len(entries) == len(props)                            # each key once
    assert all(key.startswith("envad.") for key in props)
    assert set(REQUIRED_KEYS) <= set(props)
    assert props["envad.format_version"] == "1"
    assert props["envad.model_id"] == exported.model_id == "erm-photodigits-16px-e2-s0"
    assert props["envad.input_size"] == "16" and props["envad.embedding_dim"] == "512"
    assert props["envad.algorithm"] == "erm" and props["envad.dataset"] == "photodigits"
    assert json.loads(props["envad.training_envs"])[0] == "cam-astronaut"
    assert props["envad.created"].endswith("Z") and props["envad.epochs"] == "2"
    assert json.loads(props["envad.mean"]) == pytest.approx([0.485, 0.456, 0.406])
    assert props["envad.seed"] == "0"


def test_dynamic_batch_and_torch_parity(exported, finished_run, tiny_photodigits):
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    ds = load_folder(tiny_photodigits)
    images = ds.images(ds.indices("test")[:7], 16)
    algorithm = ckpt.build_algorithm(ckpt.load_checkpoint(ckpt.latest_checkpoint(
        finished_run))).eval()
    with torch.no_grad():
        expected = algorithm.embed(to_float_nchw(images)).numpy()
    for n in (1, 7):
        (got,) = session.run(["embedding"], {"images": images[:n]})
        assert got.shape == (n, 512)
        np.testing.assert_allclose(got, expected[:n], atol=exported.tolerance)
    assert 0 <= exported.max_abs_diff <= exported.tolerance
    assert exported.scale > 0


def test_the_parity_tolerance_follows_the_embedding_s_scale():
    """1e-4 absolute for embeddings up to 1, relative above: float32 rounding of values in
    the hundreds is about 1e-5 of them, beyond any fixed absolute bound."""
    assert parity_tolerance(0.3) == parity_tolerance(1.0) == PARITY_TOLERANCE == 1e-4
    assert parity_tolerance(250.0) == pytest.approx(0.025)


def test_the_server_loads_it_and_embeds_like_training(exported, tiny_photodigits):
    encoder = OnnxEncoder(exported.path)
    assert encoder.meta.model_id == exported.model_id and encoder.dim == 512
    ds = load_folder(tiny_photodigits)
    i = int(ds.indices("val")[0])
    served = encoder.embed(decode_image(ds.read_bytes(i), 16)[None])
    (offline,) = ort.InferenceSession(str(exported.path)).run(
        ["embedding"], {"images": ds.images([i], 16)})
    np.testing.assert_array_equal(served, offline)


def test_model_id_and_failures(finished_run, tmp_path, monkeypatch):
    report = export_onnx(finished_run, tmp_path / "named.onnx", model_id="my-model_1.0",
                         parity_images=np.zeros((2, 16, 16, 3), np.uint8))
    assert report.model_id == "my-model_1.0"
    with pytest.raises(ValueError, match="model id"):
        export_onnx(finished_run, tmp_path / "bad.onnx", model_id="no spaces")
    with pytest.raises(FailedPrecondition, match="no checkpoint"):
        export_onnx(tmp_path / "empty", tmp_path / "x.onnx")
    monkeypatch.setattr(export_module, "PARITY_TOLERANCE", -1.0)
    with pytest.raises(Internal, match="parity failed"):
        export_onnx(finished_run, tmp_path / "strict.onnx")
    assert not list(tmp_path.glob("strict.onnx*"))
