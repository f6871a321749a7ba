"""ONNX model files: metadata parsing, registry scan, lookup by id."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from envad.errors import InvalidInput, NotFound
from envad.server.encoder import ModelRegistry, OnnxEncoder
from tiny_encoder import build_tiny_encoder


def test_metadata_is_read_from_the_file(tmp_path):
    encoder = OnnxEncoder(build_tiny_encoder(tmp_path / "a.onnx", model_id="cam-enc",
                                             dim=12, envs=("x", "y", "z")))
    meta = encoder.meta
    assert (meta.model_id, meta.input_size, meta.embedding_dim) == ("cam-enc", 32, 12)
    assert meta.training_envs == ("x", "y", "z") and meta.algorithm == "random"
    assert encoder.embed(np.zeros((3, 32, 32, 3), np.uint8)).shape == (3, 12)
    with pytest.raises(InvalidInput, match="uint8"):
        encoder.embed(np.zeros((1, 16, 16, 3), np.uint8))


def test_missing_metadata_and_garbage_files_are_rejected(tmp_path):
    path = build_tiny_encoder(tmp_path / "m.onnx")
    model = onnx.load(str(path))
    del model.metadata_props[:]
    onnx.save(model, str(path))
    with pytest.raises(InvalidInput, match="envad.model_id"):
        OnnxEncoder(path)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not onnx")
    with pytest.raises(InvalidInput, match="not a loadable"):
        OnnxEncoder(junk)


def test_registry_scans_skips_bad_and_duplicate_files(tmp_path):
    build_tiny_encoder(tmp_path / "a.onnx", model_id="one")
    build_tiny_encoder(tmp_path / "b.onnx", model_id="two", seed=1)
    build_tiny_encoder(tmp_path / "c.onnx", model_id="one", seed=2)
    (tmp_path / "d.onnx").write_bytes(b"junk")
    registry = ModelRegistry(tmp_path)
    assert [m.model_id for m in registry.scan()] == ["one", "two"]
    assert "duplicate" in registry.problems["c.onnx"] and "d.onnx" in registry.problems
    assert registry.get("two").meta.file == "b.onnx"
    with pytest.raises(NotFound, match="one, two"):
        registry.get("three")


def test_accelerator_setting_picks_providers_and_falls_back_with_a_reason():
    from envad.server.encoder import CPU, CUDA, choose_providers

    assert choose_providers("cpu", [CUDA, CPU]) == ([CPU], "")
    assert choose_providers("auto", [CUDA, CPU]) == ([CUDA, CPU], "")
    assert choose_providers("auto", [CPU]) == ([CPU], "")
    providers, note = choose_providers("cuda", [CPU])
    assert providers == [CPU] and "no CUDA provider" in note and "\n" not in note
    with pytest.raises(InvalidInput, match="accelerator must be one of"):
        choose_providers("tpu", [CPU])


def test_a_cuda_build_shadowed_by_the_cpu_build_is_named_with_the_fix():
    """Both ONNX Runtime builds installed: the CPU build's files win, so no CUDA; the note
    says so under `auto` too, since installing the CUDA build asked for CUDA."""
    from envad.server.encoder import CPU, CPU_BUILD, CUDA, CUDA_BUILD, choose_providers

    both = {CPU_BUILD, CUDA_BUILD}
    for accelerator in ("auto", "cuda"):
        providers, note = choose_providers(accelerator, [CPU], both)
        assert providers == [CPU] and "\n" not in note
        assert "onnxruntime-gpu is installed beside onnxruntime" in note
        assert ("pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu"
                in note)
    assert choose_providers("auto", [CPU], {CPU_BUILD}) == ([CPU], "")
    assert choose_providers("cpu", [CPU], both) == ([CPU], "")
    assert choose_providers("auto", [CUDA, CPU], both) == ([CUDA, CPU], "")


def test_installed_builds_are_read_from_the_installed_distributions(tmp_path, monkeypatch):
    """The build this environment runs on is found, and a CUDA build's metadata placed
    on the path as pip leaves it is found beside it."""
    from envad.server.encoder import CPU_BUILD, CUDA_BUILD, installed_onnxruntime_builds

    before = installed_onnxruntime_builds()
    assert before and before <= {CPU_BUILD, CUDA_BUILD}
    info = tmp_path / "onnxruntime_gpu-1.31.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime-gpu\n"
                                   "Version: 1.31.1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_onnxruntime_builds() == before | {CUDA_BUILD}


@pytest.mark.gpu
def test_cuda_encoder_matches_the_cpu_encoder(tmp_path):
    """On a CUDA machine with envad[gpu]: the CUDA session embeds as the CPU one does."""
    import onnxruntime as ort

    from envad.server.encoder import CUDA

    if CUDA not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDA provider here (install envad[gpu])")
    path = build_tiny_encoder(tmp_path / "enc.onnx")
    gpu, cpu = OnnxEncoder(path, accelerator="cuda"), OnnxEncoder(path, accelerator="cpu")
    assert gpu.providers[0] == CUDA
    images = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    np.testing.assert_allclose(gpu.embed(images), cpu.embed(images), atol=1e-4)
