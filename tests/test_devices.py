"""Device names: `auto` resolves to the GPU only when torch sees one."""

from __future__ import annotations

import torch

from envad import devices


def test_auto_is_cuda_only_when_torch_sees_a_cuda_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)   # a GPU is hardware
    assert devices.resolve_device("auto") == "cuda"


def test_named_devices_are_kept_as_given():
    for name in ("cpu", "cuda", "cuda:1"):
        assert devices.resolve_device(name) == name

