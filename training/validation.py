"""Per-epoch validation on the training cameras' `val` split (never the test cameras).

`val_knn_acc`: target (bucket or class) accuracy of a k-NN vote (cosine) of each val embedding among
training embeddings: works for every algorithm, supervised or not, and measures what
the detectors later use, the embedding. `val_acc`: the classifier's accuracy
(supervised algorithms only).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from envad.training.models import EMBEDDING_DIM, OneDnnEncoder, inference_copy, to_float_nchw


@torch.no_grad()
def embed_uint8(encoder: nn.Module, images: np.ndarray, device: str = "cpu",
                batch_size: int = 256) -> torch.Tensor:
    """Embeddings [N, 512] of uint8 NHWC images through an `inference_copy` of an
    algorithm's encoder (the embedding `Algorithm.embed` gives in eval mode), fed the
    input layout the copy runs in (dense for oneDNN's, channels-last otherwise)."""
    channels_last = not isinstance(encoder, OneDnnEncoder)
    out = [encoder(to_float_nchw(images[i:i + batch_size], channels_last=channels_last)
                   .to(device)).cpu()
           for i in range(0, len(images), batch_size)]
    return torch.cat(out) if out else torch.zeros(0, EMBEDDING_DIM)


@torch.no_grad()
def classifier_accuracy(algorithm, embeddings: torch.Tensor, targets: np.ndarray,
                        device: str = "cpu") -> float:
    """Accuracy of the classifier on embeddings from `embed_uint8` (eval mode)."""
    algorithm.eval()
    logits = algorithm.predict_embedded(embeddings.to(device))
    correct = int((logits.argmax(1).cpu().numpy() == targets).sum())
    return correct / max(len(targets), 1)


def knn_accuracy(reference: torch.Tensor, reference_y: np.ndarray, query: torch.Tensor,
                 query_y: np.ndarray, k: int = 10) -> float:
    """Majority vote of the k most cosine-similar reference rows (ties -> lowest target)."""
    if len(reference) == 0 or len(query) == 0:
        return float("nan")
    sims = F.normalize(query, dim=1) @ F.normalize(reference, dim=1).T
    top = sims.topk(min(k, len(reference)), dim=1).indices.numpy()
    n_targets = int(max(reference_y.max(), query_y.max())) + 1
    votes = np.zeros((len(top), n_targets), dtype=np.int64)
    np.add.at(votes, (np.repeat(np.arange(len(top)), top.shape[1]), reference_y[top].ravel()),
              1)
    return float((votes.argmax(axis=1) == query_y).mean())


def validate(algorithm, reference: np.ndarray, reference_y: np.ndarray, val: np.ndarray,
             val_y: np.ndarray, device: str = "cpu", k: int = 10) -> dict[str, float]:
    """The epoch's validation metrics (empty when there is no val split)."""
    if len(val) == 0:
        return {}
    algorithm.eval()
    encoder = inference_copy(algorithm.encoder, device)
    val_embeddings = embed_uint8(encoder, val, device)     # once for both metrics
    metrics = {"val_knn_acc": knn_accuracy(embed_uint8(encoder, reference, device),
                                           reference_y, val_embeddings, val_y, k)}
    if algorithm.supervised:
        metrics["val_acc"] = classifier_accuracy(algorithm, val_embeddings, val_y, device)
    return metrics
