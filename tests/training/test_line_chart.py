"""Line charts drawn with Pillow: ticks, ranges, the legend's corner, and the pixels of a
drawn series."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image, ImageColor

from envad.training.line_chart import (
    COLOURS,
    MAX_MARKED_POINTS,
    PANEL_MARGINS,
    Panel,
    data_range,
    draw_panels,
    legend_box,
    nice_ticks,
    tick_label,
)


@pytest.mark.parametrize("lo, hi, integer, expected", [
    (0.0, 1.0, False, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    (0.52, 0.61, False, [0.52, 0.54, 0.56, 0.58, 0.6]),
    (0.0, 1.01, False, [0.0, 0.25, 0.5, 0.75, 1.0]),
    (-0.45, 31.45, True, [0.0, 10.0, 20.0, 30.0]),
    (0.95, 1.05, True, [1.0]),
    (0.9, 3.1, True, [1.0, 2.0, 3.0]),
])
def test_nice_ticks_are_round_evenly_spaced_and_inside_the_range(lo, hi, integer, expected):
    ticks = nice_ticks(lo, hi, integer=integer)
    assert ticks == pytest.approx(expected)
    assert all(lo <= t <= hi for t in ticks)


@pytest.mark.parametrize("lo, hi", [(1.0, 1.0), (2.0, 1.0), (0.0, math.nan), (0.0, math.inf)])
def test_nice_ticks_refuse_an_empty_or_infinite_range(lo, hi):
    with pytest.raises(ValueError, match="finite and increasing"):
        nice_ticks(lo, hi)


def test_tick_labels_carry_the_decimals_their_spacing_needs():
    assert [tick_label(t, [0.0, 0.25, 0.5]) for t in (0.0, 0.25)] == ["0.00", "0.25"]
    assert tick_label(10.0, [0.0, 5.0, 10.0]) == "10"
    assert tick_label(0.54, [0.52, 0.54]) == "0.54"
    assert tick_label(2.5e8, [0.0, 2.5e8, 5e8]) == "2.5e+08"      # not 250000000
    assert tick_label(2e-4, [0.0, 1e-4, 2e-4]) == "0.0002"
    assert tick_label(0.0, [0.0, 2e-5]) == "0"


def test_data_range_pads_ignores_nan_and_widens_a_single_value():
    assert data_range([0.0, 1.0, math.nan]) == pytest.approx((-0.05, 1.05))
    assert data_range([2.0]) == pytest.approx((1.9, 2.1))
    assert data_range([0.0]) == pytest.approx((-0.05, 0.05))
    assert data_range([math.nan]) == (0.0, 1.0)


def test_the_legend_goes_to_the_corner_with_fewest_points():
    plot = (0.0, 0.0, 1000.0, 600.0)
    empty = legend_box(100.0, 2, plot, [])
    assert empty[2] > 900 and empty[1] < 50                      # top right by default
    rising = [(x, 600.0 - 0.6 * x) for x in range(0, 1001, 10)]   # fills top right
    box = legend_box(100.0, 2, plot, rising)
    assert not (box[2] > 900 and box[1] < 50)
    assert not any(box[0] <= x <= box[2] and box[1] <= y <= box[3] for x, y in rising)


def colour_mask(image: Image.Image, colour: str, tolerance: int = 80) -> np.ndarray:
    pixels = np.asarray(image.convert("RGB")).astype(int)
    return np.abs(pixels - np.array(ImageColor.getrgb(colour))).sum(axis=2) < tolerance


def test_a_series_is_drawn_where_its_values_map_with_gaps_at_nan(tmp_path):
    size = (600, 400)
    panel = Panel("t", "epoch", "value", {"a": ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
                                                [0.5, 0.5, 0.5, math.nan, 0.5, 0.5, 0.5])},
                  ylim=(0.0, 1.0))
    path = draw_panels(tmp_path / "chart.png", [panel], "title", size=size)
    image = Image.open(path)
    assert image.size == size and image.format == "PNG"
    blue = colour_mask(image, COLOURS[0])
    left, right, top, bottom = PANEL_MARGINS
    plot_top, plot_bottom = 34 + top, size[1] - bottom
    line_row = int(np.argmax(blue.sum(axis=1)))
    assert abs(line_row - (plot_top + plot_bottom) / 2) <= 2       # y = 0.5: mid-height
    x_lo, x_hi = data_range([1.0, 7.0])
    gap_column = round(left + (4.0 - x_lo) / (x_hi - x_lo) * (size[0] - left - right))
    assert not blue[line_row - 3:line_row + 4, gap_column].any()   # the NaN is a gap
    joined = round(left + (2.5 - x_lo) / (x_hi - x_lo) * (size[0] - left - right))
    assert blue[line_row - 2:line_row + 3, joined].any()           # finite neighbours join


def test_panels_sit_side_by_side_each_with_its_own_series(tmp_path):
    panels = [Panel("loss", "epoch", "loss", {"loss": ([1.0, 2.0], [2.0, 1.0])}),
              Panel("acc", "epoch", "acc", {"x": ([1.0, 2.0], [0.1, 0.2]),
                                            "y": ([1.0, 2.0], [0.3, 0.4])}, ylim=(0, 1))]
    image = Image.open(draw_panels(tmp_path / "two.png", panels, "run", size=(800, 300)))
    orange = colour_mask(image, COLOURS[1])
    columns = np.nonzero(orange.any(axis=0))[0]
    assert columns.size and columns.min() >= 400                  # only in the right panel


def test_a_long_series_is_a_line_without_markers(tmp_path):
    def drawn_rows(count: int) -> int:
        x = [float(i) for i in range(1, count + 1)]
        panel = Panel("t", "epoch", "value", {"a": (x, [0.5] * count)}, ylim=(0.0, 1.0))
        image = Image.open(draw_panels(tmp_path / f"{count}.png", [panel], "t",
                                       size=(600, 400)))
        blue = colour_mask(image, COLOURS[0])[:, PANEL_MARGINS[0] + 10:]
        return int((blue.sum(axis=1) > 100).sum())       # rows the series fills widely

    assert drawn_rows(40) > drawn_rows(MAX_MARKED_POINTS + 40)  # markers widen the band
