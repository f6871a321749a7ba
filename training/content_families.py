"""What PhotoDigits' cameras film: a registry of content families (`Recipe.content`).

A family is a bank of clean glyphs (float or uint8 [N, H, W] in 0..16, the ink coverage
PhotoDigits' renderer composites over a camera's background) with an integer class label
each. `digits`: scikit-learn's 1,797 real 8x8 handwritten digits (ten classes).
`shapes`: procedural shapes with near-neighbour classes (training/shapes.py, twelve
classes), drawn for the generator's seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from envad.training import shapes

Bank = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class ContentFamily:
    """A family's name, its class labels, and `bank(seed) -> (glyphs, labels)`."""

    name: str
    labels: tuple[int, ...]
    bank: Callable[[int], Bank]
    class_names: tuple[str, ...] = ()


#: family name -> family (filled by `register`)
CONTENT_FAMILIES: dict[str, ContentFamily] = {}


def register(family: ContentFamily) -> ContentFamily:
    """Add a family to CONTENT_FAMILIES; a duplicate name is an error."""
    if family.name in CONTENT_FAMILIES:
        raise ValueError(f"content family {family.name!r} is registered already")
    CONTENT_FAMILIES[family.name] = family
    return family


def get(name: str) -> ContentFamily:
    """The family called `name` (ValueError naming the known ones otherwise)."""
    if name not in CONTENT_FAMILIES:
        raise ValueError(f"unknown content family {name!r}; known: "
                         f"{', '.join(CONTENT_FAMILIES)}")
    return CONTENT_FAMILIES[name]


def _digits_bank(seed: int) -> Bank:
    """scikit-learn's digits (the same for every seed: the instances are real)."""
    # scikit-learn's datasets take 0.8 s to import; only the digits family reads them
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images, digits.target


register(ContentFamily("digits", tuple(range(10)), _digits_bank,
                       tuple(str(d) for d in range(10))))
register(ContentFamily("shapes", tuple(range(len(shapes.CLASSES))), shapes.bank,
                       shapes.CLASSES))
