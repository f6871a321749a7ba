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
