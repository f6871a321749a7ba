"""Line charts drawn with Pillow: panels of series against one x axis, saved as PNG.

A training run draws its curves.png with it instead of matplotlib, whose import alone
(about 0.45 s) was a tenth of a short run's fixed cost. Panels have a title, axis labels,
"nice" ticks (steps of 1, 2, 2.5 or 5 times a power of ten; whole numbers on an integer
axis), a legend and markers on every point of a series of up to 60; a NaN leaves a gap.
Drawn at twice the size and scaled down, so lines and text are smoothed.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

#: matplotlib's default colour cycle, so the curves look like the evaluation's plots
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
SCALE = 2                       # drawn at twice the size, then smoothed down
PANEL_MARGINS = (78, 16, 34, 50)    # left, right, top, bottom, in output pixels
MAX_MARKED_POINTS = 60          # a longer series is a line without markers


def colours(count: int) -> list[str]:
    """The first `count` colours of the cycle, repeating it when there are more series."""
    return [COLOURS[i % len(COLOURS)] for i in range(count)]


@dataclass(frozen=True)
class Panel:
    """One chart: named series of (x, y) points; `ylim` fixes the y range."""

    title: str
    xlabel: str
    ylabel: str
    series: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    ylim: tuple[float, float] | None = None
    integer_x: bool = True


def nice_ticks(lo: float, hi: float, count: int = 6, *, integer: bool = False) -> list[float]:
    """About `count` evenly spaced round values covering [lo, hi] (steps 1, 2, 2.5 or 5
    times a power of ten; at least 1 when `integer`)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        raise ValueError(f"tick range must be finite and increasing, got [{lo}, {hi}]")
    raw = (hi - lo) / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value = first + len(ticks) * step
    return ticks


def tick_label(value: float, ticks: list[float]) -> str:
    """`value` with as many decimals as the spacing of `ticks` needs; in scientific
    notation where that would be long (a tick of 1e5 or more, or a step under 1e-3)."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    if max(abs(t) for t in ticks) >= 1e5 or step < 1e-3:
        return f"{value:.3g}"
    decimals = 0
    while decimals < 6 and abs(round(step, decimals) - step) > step * 1e-6:
        decimals += 1
    return f"{value:.{decimals}f}"


def data_range(values: list[float]) -> tuple[float, float]:
    """The finite values' range with a 5% margin; a single value gets a range around it."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    pad = (hi - lo) * 0.05 if hi > lo else max(abs(lo) * 0.05, 0.05)
    return lo - pad, hi + pad


def draw_panels(path: Path, panels: list[Panel], title: str, *,
                size: tuple[int, int] = (1000, 380)) -> Path:
    """The panels side by side under `title`, written to `path` as a PNG."""
    width, height = size[0] * SCALE, size[1] * SCALE
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=13 * SCALE)
    title_font = ImageFont.load_default(size=15 * SCALE)
    _centred(draw, (width // 2, 16 * SCALE), title, title_font)
    top = 34 * SCALE
    panel_width = width // max(len(panels), 1)
    for i, panel in enumerate(panels):
        _draw_panel(image, draw, panel, (i * panel_width, top, (i + 1) * panel_width, height),
                    font)
    image.resize(size, Image.Resampling.LANCZOS).save(path, optimize=False)
    return Path(path)


def _draw_panel(image, draw, panel: Panel, box, font) -> None:
    left, right, top, bottom = (m * SCALE for m in PANEL_MARGINS)
    x0, y0, x1, y1 = box[0] + left, box[1] + top, box[2] - right, box[3] - bottom
    xs = [x for x_values, _ in panel.series.values() for x in x_values]
    ys = [y for _, y_values in panel.series.values() for y in y_values]
    x_lo, x_hi = data_range(xs)
    y_lo, y_hi = panel.ylim if panel.ylim is not None else data_range(ys)

    def to_pixel(x: float, y: float) -> tuple[float, float]:
        return (x0 + (x - x_lo) / (x_hi - x_lo) * (x1 - x0),
                y1 - (y - y_lo) / (y_hi - y_lo) * (y1 - y0))

    draw.rectangle((x0, y0, x1, y1), outline="black", width=SCALE)
    _centred(draw, ((x0 + x1) // 2, box[1] + 14 * SCALE), panel.title, font)
    x_ticks = nice_ticks(x_lo, x_hi, integer=panel.integer_x)
    for x in x_ticks:
        px, _ = to_pixel(x, y_lo)
        draw.line((px, y1, px, y1 + 5 * SCALE), fill="black", width=SCALE)
        _centred(draw, (px, y1 + 15 * SCALE), tick_label(x, x_ticks), font)
    y_ticks = nice_ticks(y_lo, y_hi)
    for y in y_ticks:
        _, py = to_pixel(x_lo, y)
        draw.line((x0 - 5 * SCALE, py, x0, py), fill="black", width=SCALE)
        draw.text((x0 - 8 * SCALE, py), tick_label(y, y_ticks), fill="black", font=font,
                  anchor="rm")
    _centred(draw, ((x0 + x1) // 2, y1 + 36 * SCALE), panel.xlabel, font)
    _vertical_text(image, (box[0] + 12 * SCALE, (y0 + y1) // 2), panel.ylabel, font)
    radius = 3.5 * SCALE
    drawn = []
    for (x_values, y_values), colour in zip(panel.series.values(),
                                            colours(len(panel.series)), strict=True):
        points = [to_pixel(x, y) if math.isfinite(x) and math.isfinite(y) else None
                  for x, y in zip(x_values, y_values, strict=True)]
        drawn += [p for p in points if p is not None]
        for a, b in itertools.pairwise(points):
            if a is not None and b is not None:
                draw.line((a, b), fill=colour, width=2 * SCALE)
        for point in points if len(points) <= MAX_MARKED_POINTS else ():
            if point is not None:
                px, py = point
                draw.ellipse((px - radius, py - radius, px + radius, py + radius), fill=colour)
    _legend(draw, list(panel.series), (x0, y0, x1, y1), drawn, font)


def legend_box(names_width: float, rows: int, plot: tuple[float, float, float, float],
               points: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    """Where the legend goes: the plot's corner (top right first) that covers the fewest
    drawn points."""
    width, height = names_width + 40 * SCALE, 17 * SCALE * rows + 6 * SCALE
    x0, y0, x1, y1 = plot
    pad = 8 * SCALE
    corners = [(x1 - pad - width, y0 + pad), (x1 - pad - width, y1 - pad - height),
               (x0 + pad, y0 + pad), (x0 + pad, y1 - pad - height)]

    def covered(corner: tuple[float, float]) -> int:
        left, top = corner
        return sum(left <= px <= left + width and top <= py <= top + height
                   for px, py in points)

    left, top = min(corners, key=covered)         # min keeps the first of equals
    return left, top, left + width, top + height


def _legend(draw, names: list[str], plot, points, font) -> None:
    if not names:
        return
    line_height = 17 * SCALE
    text_width = max(draw.textlength(name, font=font) for name in names)
    x0, y0, x1, y1 = legend_box(text_width, len(names), plot, points)
    draw.rectangle((x0, y0, x1, y1), fill="white", outline="#cccccc", width=SCALE)
    for i, (name, colour) in enumerate(zip(names, colours(len(names)), strict=True)):
        y = y0 + 3 * SCALE + line_height * i + line_height / 2
        draw.line((x0 + 6 * SCALE, y, x0 + 26 * SCALE, y), fill=colour, width=2 * SCALE)
        draw.ellipse((x0 + 13 * SCALE, y - 3 * SCALE, x0 + 19 * SCALE, y + 3 * SCALE),
                     fill=colour)
        draw.text((x0 + 32 * SCALE, y), name, fill="black", font=font, anchor="lm")


def _centred(draw, centre, text: str, font) -> None:
    draw.text(centre, text, fill="black", font=font, anchor="mm")


def _vertical_text(image, centre, text: str, font) -> None:
    """`text` turned 90 degrees anticlockwise, centred on `centre`."""
    left, top, right, bottom = font.getbbox(text)
    label = Image.new("RGB", (int(right - left) + 4, int(bottom - top) + 4), "white")
    ImageDraw.Draw(label).text((2 - left, 2 - top), text, fill="black", font=font)
    turned = label.rotate(90, expand=True)
    image.paste(turned, (int(centre[0] - turned.width / 2), int(centre[1] - turned.height / 2)))
