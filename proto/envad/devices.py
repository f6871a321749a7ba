"""Where training runs: the device names every training command takes.

Plain Python shared by client and training (the client's `demo` and `retrain` and the
training CLIs register their `--device` flags from here); torch is imported only to
resolve `auto`.
"""

from __future__ import annotations

#: where a run trains (`cuda:N` too); `auto` is cuda when torch sees a CUDA device
DEVICES = ("cpu", "cuda", "auto")
DEVICE_HELP = "cpu, cuda, cuda:N or auto (cuda when torch sees a CUDA device, else cpu)"


def resolve_device(device: str) -> str:
    """`auto` -> `cuda` when torch sees a CUDA device, else `cpu`; any other name as
    given. A run records the device it resolved to."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
