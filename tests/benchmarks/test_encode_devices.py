"""benchmarks.encode_devices: one line per engine, torch's graph is the served one."""

from __future__ import annotations

import json

from benchmarks import encode_devices, report


def test_each_engine_gets_a_line_and_torch_runs_the_exported_weights(capsys, tmp_path):
    encode_devices.main(["--size", "32", "--batch", "2", "--rounds", "1",
                         "--seconds", "0.01", "--device", "cpu"])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_engine = {(r["engine"], r["providers"][0]): r for r in records}
    cpu = by_engine[("onnxruntime", "CPUExecutionProvider")]
    assert cpu["relative_to_onnxruntime_cpu"] == 1.0 and cpu["max_abs_difference"] == 0.0
    torch_line = by_engine[("torch", "cpu")]
    # the same seed builds the same weights as the exported graph: equal embeddings
    assert torch_line["max_abs_difference"] < 1e-4 and torch_line["images_per_s"] > 0
    # this install has ONNX Runtime's CPU build: the CUDA line says why it is missing
    cuda = by_engine[("onnxruntime", "CUDAExecutionProvider")]
    assert "no CUDA provider" in cuda["missing"] and "images_per_s" not in cuda
    path = tmp_path / "encode_devices.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    table = report.render(path)
    assert "| onnxruntime | CPUExecutionProvider |" in table and "| 1.00 |" in table
    assert "| onnxruntime | CUDAExecutionProvider | not available: " in table
