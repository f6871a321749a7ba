"""A small real ONNX encoder in envad's model format, built with onnx.helper (no torch).

Graph: uint8 NHWC -> float -> /255 -> (x - mean) / std -> NCHW -> 3x3 conv (stride 2)
-> ReLU -> global average pool -> [N, D]. `reference_embed` computes the same in NumPy,
which is the reference path for the golden-image parity test.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def tiny_weights(dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    weight = rng.normal(0, 0.5, size=(dim, 3, 3, 3)).astype(np.float32)
    bias = rng.normal(0, 0.1, size=(dim,)).astype(np.float32)
    return weight, bias


def build_tiny_encoder(path: Path, *, model_id: str = "tiny-test", size: int = 32,
                       dim: int = 16, seed: int = 0, envs=("cam-a", "cam-b"),
                       algorithm: str = "random") -> Path:
    """Write a tiny encoder ONNX file to `path` and return the path."""
    weight, bias = tiny_weights(dim, seed)
    inits = [
        numpy_helper.from_array(np.array(255.0, np.float32), "scale"),
        numpy_helper.from_array(MEAN.reshape(1, 1, 1, 3), "mean"),
        numpy_helper.from_array(STD.reshape(1, 1, 1, 3), "std"),
        numpy_helper.from_array(weight, "conv_w"),
        numpy_helper.from_array(bias, "conv_b"),
    ]
    nodes = [
        helper.make_node("Cast", ["images"], ["x_f"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["x_f", "scale"], ["x_01"]),
        helper.make_node("Sub", ["x_01", "mean"], ["x_c"]),
        helper.make_node("Div", ["x_c", "std"], ["x_n"]),
        helper.make_node("Transpose", ["x_n"], ["x_nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["x_nchw", "conv_w", "conv_b"], ["conv"],
                         kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["act"]),
        helper.make_node("GlobalAveragePool", ["act"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["embedding"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_encoder",
        [helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", size, size, 3])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", dim])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    meta = {
        "envad.format_version": "1", "envad.model_id": model_id,
        "envad.input_size": str(size), "envad.embedding_dim": str(dim),
        "envad.algorithm": algorithm, "envad.training_envs": json.dumps(list(envs)),
        "envad.dataset": "tiny-fixture",
        "envad.created": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).isoformat(),
        "envad.mean": json.dumps(MEAN.tolist()), "envad.std": json.dumps(STD.tolist()),
        "envad.seed": str(seed),
    }
    onnx.helper.set_model_props(model, meta)
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def reference_embed(images: np.ndarray, *, dim: int = 16, seed: int = 0) -> np.ndarray:
    """NumPy implementation of the tiny encoder (float64), for parity checks."""
    weight, bias = tiny_weights(dim, seed)
    x = (images.astype(np.float64) / 255.0 - MEAN) / STD          # N,H,W,3
    x = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    n, hp, wp, _ = x.shape
    out_h, out_w = (hp - 3) // 2 + 1, (wp - 3) // 2 + 1
    patches = np.stack([x[:, i:i + 2 * out_h:2, j:j + 2 * out_w:2, :]
                        for i in range(3) for j in range(3)], axis=-2)  # N,oh,ow,9,3
    kernel = weight.transpose(2, 3, 1, 0).reshape(9, 3, dim)            # (kh*kw),c,d
    conv = np.einsum("nhwkc,kcd->nhwd", patches, kernel) + bias
    return np.maximum(conv, 0).mean(axis=(1, 2))


def png_bytes(array: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def synthetic_images(kind: str, count: int, *, size: int = 32, seed: int = 0) -> list[bytes]:
    """PNG images of two clearly different kinds: 'normal' (dark noisy green texture)
    and 'odd' (bright saturated stripes). A new list each call; the images of the same
    arguments are made once per test process (many tests ask for the same ones)."""
    return list(_synthetic_images(kind, count, size, seed))


@functools.cache
def _synthetic_images(kind: str, count: int, size: int, seed: int) -> tuple[bytes, ...]:
    rng = np.random.default_rng(seed)
    images = []
    for _ in range(count):
        if kind == "normal":
            base = np.array([40, 90, 40]) + rng.normal(0, 12, size=(size, size, 3))
        elif kind == "odd":
            stripes = (np.arange(size)[None, :] // 3 % 2) * 255
            base = np.stack([stripes.repeat(size, 0), 255 - stripes.repeat(size, 0),
                             np.full((size, size), 255)], -1) + rng.normal(0, 5, (size, size, 3))
        else:
            raise ValueError(kind)
        images.append(png_bytes(np.clip(base, 0, 255).astype(np.uint8)))
    return tuple(images)
