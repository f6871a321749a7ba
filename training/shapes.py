"""Procedural shapes: a second content family for PhotoDigits' cameras, with near neighbours.

Twelve classes drawn as filled polygons (numpy + PIL, no download), in near-neighbour
pairs (`NEAR_PAIRS`): square / rounded square, disc / hexagon, 5-point / 6-point star,
plus / cross (the plus turned 45 degrees), triangle up / triangle down, disc / ring,
square / diamond (the square turned 45 degrees). Every
instance varies: size, aspect, rotation (within `ROTATION_DEG`), stroke or arm width,
corner radius, star depth, a low-frequency wobble of the outline and a small offset, so a
class is a distribution of glyphs, not one picture to memorise.

A glyph is an anti-aliased coverage mask (drawn at `SUPERSAMPLE` times `SIDE` and
box-averaged), uint8 in 0..16 like scikit-learn's 8x8 digits, so PhotoDigits' renderer
composites it unchanged.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

SIDE = 24                 # glyph side of the content bank (px)
SUPERSAMPLE = 4           # drawn at 96 px, averaged down: anti-aliased edges
ROTATION_DEG = 12.0       # per-instance rotation jitter, +- degrees
#: label -> class name
CLASSES = ("square", "rounded_square", "disc", "hexagon", "star5", "star6", "plus", "cross",
           "triangle_up", "triangle_down", "ring", "diamond")
#: the near-neighbour pairs (labels): one shape and a small change of it
NEAR_PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (2, 10), (0, 11))

Polygon = np.ndarray      # float [K, 2] in unit coordinates, centre 0, y down


def _circle(radius: float, n: int = 96) -> Polygon:
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return radius * np.stack([np.cos(t), np.sin(t)], axis=1)


def _regular(sides: int, radius: float, start_deg: float) -> Polygon:
    t = np.deg2rad(start_deg) + np.arange(sides) * 2 * np.pi / sides
    return radius * np.stack([np.cos(t), np.sin(t)], axis=1)


def _star(points: int, outer: float, depth: float) -> Polygon:
    t = -np.pi / 2 + np.arange(2 * points) * np.pi / points
    r = np.where(np.arange(2 * points) % 2 == 0, outer, outer * depth)
    return np.stack([r * np.cos(t), r * np.sin(t)], axis=1)


def _rounded_square(half: float, radius: float, per_corner: int = 12) -> Polygon:
    corners = [(half - radius, half - radius), (-(half - radius), half - radius),
               (-(half - radius), -(half - radius)), (half - radius, -(half - radius))]
    arcs = []
    for k, (cx, cy) in enumerate(corners):
        t = np.linspace(k * np.pi / 2, (k + 1) * np.pi / 2, per_corner)
        arcs.append(np.stack([cx + radius * np.cos(t), cy + radius * np.sin(t)], axis=1))
    return np.concatenate(arcs)


def _plus(arm: float, half_width: float) -> Polygon:
    a, w = arm, half_width
    return np.array([(w, -a), (w, -w), (a, -w), (a, w), (w, w), (w, a), (-w, a), (-w, w),
                     (-a, w), (-a, -w), (-w, -w), (-w, -a)], dtype=float)


def outline(label: int, rng: np.random.Generator) -> tuple[list[Polygon], list[Polygon]]:
    """The class's (filled polygons, holes) before the instance transform."""
    name = CLASSES[label]
    if name in ("square", "diamond"):
        return [_regular(4, 0.8 * math.sqrt(2), 45.0 if name == "square" else 90.0)], []
    if name == "rounded_square":
        return [_rounded_square(0.8, 0.8 * rng.uniform(0.3, 0.5))], []
    if name in ("disc", "ring"):
        holes = [_circle(0.82 - rng.uniform(0.22, 0.34))] if name == "ring" else []
        return [_circle(0.82)], holes
    if name in ("star5", "star6"):
        return [_star(5 if name == "star5" else 6, 0.9, rng.uniform(0.42, 0.55))], []
    if name in ("plus", "cross"):
        plus = _plus(0.85, rng.uniform(0.14, 0.24))
        return [_rotate(plus, 45.0) if name == "cross" else plus], []
    if name in ("triangle_up", "triangle_down"):
        return [_regular(3, 0.9, -90.0 if name == "triangle_up" else 90.0)], []
    return [_regular(6, 0.85, 0.0)], []                                  # hexagon


def _rotate(poly: Polygon, degrees: float) -> Polygon:
    t = np.deg2rad(degrees)
    rotation = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    return poly @ rotation.T


def instance_transform(polys: list[Polygon], rng: np.random.Generator) -> list[Polygon]:
    """Wobble (outline radius times 1 + a sin(k theta + phase)), aspect, rotation, scale
    and offset of one instance, the same for all of its polygons."""
    amp, k, phase = rng.uniform(0.0, 0.06), int(rng.integers(2, 4)), rng.uniform(0, 2 * np.pi)
    aspect = rng.uniform(0.88, 1.12)
    degrees = rng.uniform(-ROTATION_DEG, ROTATION_DEG)
    scale = rng.uniform(0.78, 1.0)
    offset = rng.uniform(-0.06, 0.06, size=2)
    out = []
    for poly in polys:
        theta = np.arctan2(poly[:, 1], poly[:, 0])
        p = poly * (1 + amp * np.sin(k * theta + phase))[:, None]
        p = p * np.array([aspect, 1 / aspect])
        out.append(_rotate(p, degrees) * scale + offset)
    return out


def draw(label: int, rng: np.random.Generator, side: int = SIDE) -> np.ndarray:
    """One instance of class `label`: uint8 [side, side] coverage in 0..16."""
    filled, holes = outline(label, rng)
    transformed = instance_transform(filled + holes, rng)
    big = side * SUPERSAMPLE
    canvas = Image.new("L", (big, big), 0)
    pen = ImageDraw.Draw(canvas)
    for k, poly in enumerate(transformed):
        points = (poly * 0.5 + 0.5) * big          # unit square [-1, 1] -> pixels
        pen.polygon([tuple(p) for p in points.tolist()], fill=255 if k < len(filled) else 0)
    coverage = np.asarray(canvas, dtype=np.float32).reshape(side, SUPERSAMPLE, side,
                                                            SUPERSAMPLE).mean(axis=(1, 3))
    return np.round(coverage / 255.0 * 16.0).astype(np.uint8)


def bank(seed: int, per_class: int = 180) -> tuple[np.ndarray, np.ndarray]:
    """`per_class` instances of every class: (glyphs uint8 [N, SIDE, SIDE] in 0..16,
    labels [N]), deterministic for `seed` (instance i of class c from seed, c, i)."""
    glyphs, labels = [], []
    for label in range(len(CLASSES)):
        for i in range(per_class):
            glyphs.append(draw(label, np.random.default_rng([seed, 41, label, i])))
            labels.append(label)
    return np.stack(glyphs), np.array(labels)
