"""The k-NN validation metric on toy embeddings."""

from __future__ import annotations

import math

import numpy as np
import torch

from envad.training.validation import knn_accuracy


def test_knn_accuracy():
    reference = torch.tensor([[1.0, 0.0]] * 5 + [[0.0, 1.0]] * 5)
    labels = np.array([0] * 5 + [1] * 5)
    query = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    assert knn_accuracy(reference, labels, query, np.array([0, 1]), k=3) == 1.0
    assert knn_accuracy(reference, labels, query, np.array([1, 0]), k=3) == 0.0
    assert knn_accuracy(reference, labels, query, np.array([0, 0]), k=3) == 0.5
    assert math.isnan(knn_accuracy(reference[:0], labels[:0], query, np.array([0, 1])))


def test_validation_scores_the_classifier_on_the_embeddings_it_computed(monkeypatch):
    from envad.training import validation
    from envad.training.algorithms import get
    from envad.training.models import EncoderConfig, to_float_nchw

    torch.manual_seed(0)
    algorithm = get("erm")(EncoderConfig(16), None, num_envs=2, total_steps=1, num_classes=3)
    rng = np.random.default_rng(0)
    reference = rng.integers(0, 256, (12, 16, 16, 3), dtype=np.uint8)
    val = rng.integers(0, 256, (10, 16, 16, 3), dtype=np.uint8)
    val_y = rng.integers(0, 3, 10)
    algorithm.eval()
    with torch.no_grad():
        expected = float((algorithm.predict(to_float_nchw(val)).argmax(1).numpy()
                          == val_y).mean())
    forwards: list[int] = []
    copies = []

    def counted_copy(encoder, device="cpu"):
        copy = inference_copy(encoder, device)
        copy.register_forward_hook(lambda module, inputs, output: forwards.append(len(inputs[0])))
        copies.append(copy)
        return copy

    inference_copy = validation.inference_copy
    monkeypatch.setattr(validation, "inference_copy", counted_copy)
    metrics = validation.validate(algorithm, reference, rng.integers(0, 3, 12), val, val_y, k=3)
    assert metrics["val_acc"] == expected
    assert 0.0 <= metrics["val_knn_acc"] <= 1.0
    assert len(copies) == 1                    # one inference copy per validation
    assert sorted(forwards) == [10, 12]        # each image through it once
