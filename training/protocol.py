"""Names and rules of the evaluation protocol, shared by the evaluation, its report and
its plots: the rows of a result table beyond the detectors, the result variants, and
which rows detectors are fitted on.

They live apart from `evaluate.py` so that the report and the plots (which the
evaluation calls) need not import the evaluation back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the row of the mean calibrated score of every detector
ENSEMBLE = "Ensemble"
#: the row of the mean over detectors (not the ensemble) within a seed
MEAN_AD = "Mean AD"
#: the pretraining scored when an evaluation is given weights: the weights' encoder as
#: it is, frozen, no training on the benchmark (the paper's "Other dataset" ResNet column)
FROZEN = "frozen-pretrained"
#: result variants every evaluation has (the space steps add `space_variant(NAME)`)
VARIANTS = ("plain", "stylist")
#: settings an evaluation identity leaves out at these values (their defaults), so that
#: results scored before a setting existed stay valid; reports read them back with these
IDENTITY_DEFAULTS: dict[str, Any] = {"task": "bucket", "augment": "none", "aux": "none",
                                     "hparams": {}, "spaces": (),
                                     "score_adaptation": "none"}


def space_label(space: str, score_adaptation: str = "none") -> str:
    """A space step with its score adaptation when it has one
    (`white_l2:0.001+camera:64`), as report columns name it."""
    return space + ("" if score_adaptation == "none" else f"+{score_adaptation}")


def space_variant(space: str, score_adaptation: str = "none") -> str:
    """Name of the result variant of a space step (`space:` + its label)."""
    return f"space:{space_label(space, score_adaptation)}"


def result_name(algorithm: str, seed: int) -> str:
    """The file stem of one (algorithm, seed)'s result in a report's `results/` folder
    (`.json`: its numbers; `.npz`: its score arrays)."""
    return f"{algorithm}-s{seed}"


def fit_indices(dataset) -> np.ndarray:
    """Rows detectors are fitted on: normal `train` images of the training cameras."""
    return dataset.indices(split="train", normal_only=True)
