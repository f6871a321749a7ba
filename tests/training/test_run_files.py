"""run.json's readers: the last epoch's val metrics and the training seconds."""

import pytest

from envad.training.run_files import last_val_metrics, read_run, training_seconds, write_run


def run_with(epochs):
    return {"config": {}, "status": "done", "epochs": epochs}


def test_last_val_metrics_are_the_last_epochs_recorded_ones():
    run = run_with([{"epoch": 1, "val_acc": 0.5, "val_knn_acc": 0.4, "seconds": 2.0},
                    {"epoch": 2, "val_acc": 0.9, "val_knn_acc": None, "seconds": 3.0}])
    assert last_val_metrics(run) == {"val_acc": 0.9}


def test_a_run_without_epochs_has_no_val_metrics_and_no_training_seconds():
    assert last_val_metrics(run_with([])) == {}
    assert training_seconds(run_with([])) == 0.0


def test_training_seconds_sum_the_epochs():
    run = run_with([{"seconds": 2.5}, {"seconds": 3.0}, {"epoch": 3}])
    assert training_seconds(run) == pytest.approx(5.5)


def test_write_run_then_read_run_round_trips_and_leaves_no_temporary(tmp_path):
    run = run_with([{"epoch": 1, "val_knn_acc": 0.75, "seconds": 1.0}])
    write_run(tmp_path, run)
    assert read_run(tmp_path) == run
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_read_run_of_a_dir_without_run_json_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an envad training run"):
        read_run(tmp_path)
