"""LISA's pair selection: intra-label = same bucket, other env; intra-domain = same env,
other bucket; a sample without a valid partner keeps itself."""

from __future__ import annotations

import torch

from envad.training.algorithms.lisa import lisa_partners
from tiny_algorithms import build, steps

Y = torch.tensor([0, 0, 1, 1, 0, 1, 0])
ENVS = torch.tensor([0, 1, 0, 1, 2, 2, 3])


def _all_partners(intra_label: bool) -> list[set[int]]:
    seen: list[set[int]] = [set() for _ in Y]
    for seed in range(200):
        partners = lisa_partners(Y, ENVS, intra_label, torch.Generator().manual_seed(seed))
        for i, j in enumerate(partners.tolist()):
            seen[i].add(j)
    return seen


def test_intra_label_pairs():
    seen = _all_partners(True)
    for i, partners in enumerate(seen):
        expected = {j for j in range(len(Y)) if Y[j] == Y[i] and ENVS[j] != ENVS[i]}
        assert partners == expected, i                  # every valid partner, only those


def test_intra_domain_pairs():
    seen = _all_partners(False)
    for i, partners in enumerate(seen):
        expected = {j for j in range(len(Y)) if ENVS[j] == ENVS[i] and Y[j] != Y[i]}
        assert partners == (expected or {i}), i         # env 3 has one sample: itself


def test_update_reports_strategy(tiny_train_data):
    batch = steps(tiny_train_data, 1)[0]
    logs = build("lisa", tiny_train_data, p_sel=1.0).update(batch)
    assert logs["intra_label"] == 1.0 and logs["paired"] > 0.5
    logs = build("lisa", tiny_train_data, p_sel=0.0).update(batch)
    assert logs["intra_label"] == 0.0
