"""curves.png of a training run, drawn with matplotlib: the file, its two panels, their
series, gaps and axes, and what drawing it needs."""

from __future__ import annotations

import math
import subprocess
import sys

from PIL import Image

from envad.training.curves import (
    MAX_MARKED_POINTS,
    PANEL_TITLES,
    curves_figure,
    training_curves,
)

EPOCHS = [{"epoch": 0, "val_knn_acc": 0.5},
          {"epoch": 1, "train": {"loss": 0.9, "penalty": 0.3}, "val_knn_acc": 0.6,
           "val_acc": 0.7},
          {"epoch": 2, "train": {"loss": 0.5}, "val_knn_acc": 0.8, "val_acc": 0.9}]


def _lines(ax) -> dict[str, tuple[list[float], list[float]]]:
    return {line.get_label(): ([float(v) for v in line.get_xdata()],
                               [float(v) for v in line.get_ydata()])
            for line in ax.get_lines()}


def test_curves_are_drawn_for_trained_epochs_only(tmp_path):
    path = training_curves(tmp_path / "curves.png", EPOCHS, "erm, seed 0")
    assert path == tmp_path / "curves.png"
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert training_curves(tmp_path / "none.png", EPOCHS[:1], "random") is None
    assert curves_figure(EPOCHS[:1], "random") is None
    assert not (tmp_path / "none.png").exists()


def test_the_png_is_a_valid_image_of_the_figure_size(tmp_path):
    path = training_curves(tmp_path / "curves.png", EPOCHS, "erm")
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == (1100, 400)
        assert len(image.convert("RGB").getcolors(1 << 20)) > 10     # drawn, not blank


def test_a_run_draws_its_curves_with_matplotlib_without_pyplot_or_a_display(tmp_path):
    code = ("import sys; from pathlib import Path; "
            "from envad.training.curves import training_curves; "
            "training_curves(Path(sys.argv[1]), [{'epoch': 1, 'train': {'loss': 1.0}, "
            "'val_acc': 0.5}], 'erm'); "
            "print('matplotlib' in sys.modules, 'matplotlib.pyplot' in sys.modules)")
    env = {"PATH": "/usr/bin:/bin", "MPLBACKEND": "", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "curves.png")],
                         capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["True", "False"]
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_two_panels_side_by_side_with_titles_labels_and_the_run_title():
    figure = curves_figure(EPOCHS, "erm, seed 0")
    left, right = figure.axes
    assert (left.get_title(), right.get_title()) == PANEL_TITLES
    assert (left.get_xlabel(), left.get_ylabel()) == ("epoch", "mean training loss")
    assert (right.get_xlabel(), right.get_ylabel()) == ("epoch", "accuracy")
    assert left.get_position().x1 <= right.get_position().x0          # left of it
    assert figure.get_suptitle() == "erm, seed 0"


def test_each_training_loss_is_a_series_with_a_gap_where_an_epoch_lacks_it():
    left = curves_figure(EPOCHS, "erm").axes[0]
    lines = _lines(left)
    assert sorted(lines) == ["loss", "penalty"]
    assert lines["loss"] == ([1.0, 2.0], [0.9, 0.5])          # epoch 0 left out
    x, y = lines["penalty"]
    assert x == [1.0, 2.0] and y[0] == 0.3 and math.isnan(y[1])
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["loss", "penalty"]


def test_the_validation_panel_holds_the_recorded_metrics_on_0_to_1():
    right = curves_figure(EPOCHS, "erm").axes[1]
    assert _lines(right) == {"val_knn_acc": ([1.0, 2.0], [0.6, 0.8]),
                             "val_acc": ([1.0, 2.0], [0.7, 0.9])}
    assert right.get_ylim() == (0.0, 1.01)
    only_knn = curves_figure([{"epoch": 1, "train": {"loss": 1.0}, "val_knn_acc": 0.4}],
                             "mocov3").axes[1]
    assert list(_lines(only_knn)) == ["val_knn_acc"]


def test_the_epoch_axis_has_whole_number_ticks():
    epochs = [{"epoch": n, "train": {"loss": 1.0 / n}} for n in range(1, 4)]
    figure = curves_figure(epochs, "erm")
    figure.canvas.draw()
    for ax in figure.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks)


def test_a_short_run_marks_its_points_and_a_long_one_is_a_plain_line():
    def marker(count: int) -> str:
        epochs = [{"epoch": n, "train": {"loss": 1.0}} for n in range(1, count + 1)]
        figure = curves_figure(epochs, "erm")
        assert figure is not None
        return str(figure.axes[0].get_lines()[0].get_marker())

    assert marker(MAX_MARKED_POINTS) == "o"
    assert marker(MAX_MARKED_POINTS + 1) in ("None", "", None)


def test_a_run_without_validation_metrics_draws_an_empty_validation_panel(tmp_path):
    epochs = [{"epoch": 1, "train": {"loss": 2.0}}, {"epoch": 2, "train": {"loss": 1.0}}]
    figure = curves_figure(epochs, "random")
    assert figure.axes[1].get_lines() == [] and figure.axes[1].get_legend() is None
    assert training_curves(tmp_path / "c.png", epochs, "random").stat().st_size > 0


def test_drawing_twice_leaves_no_figure_open_in_pyplot(tmp_path):
    from envad.training.plots import pyplot

    plt = pyplot()
    before = plt.get_fignums()
    for n in range(2):
        training_curves(tmp_path / f"{n}.png", EPOCHS, "erm")
    assert plt.get_fignums() == before
