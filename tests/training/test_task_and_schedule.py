"""`--task class`, `--augment style`, the warm-up + cosine schedule and held-out cameras /
classes, through TrainData, the algorithms and `train()`."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from envad.training.algorithms import get
from envad.training.algorithms.base import scheduled_lr
from envad.training.batches import TrainData
from envad.training.data import DatasetError, load_folder
from envad.training.models import EncoderConfig
from envad.training.run import read_run, train
from envad.training.validation import knn_accuracy
from tiny_algorithms import steps, tiny_config


@pytest.fixture(scope="module")
def class_data(tiny_photodigits):
    ds = load_folder(tiny_photodigits)
    return TrainData(ds, ds.indices("train", normal_only=True), 16, ds.envs("train"),
                     task="class")


def test_class_task_targets_every_normal_class(class_data, tiny_train_data):
    assert class_data.class_names == ["0", "1", "2", "3", "4", "5"]
    assert class_data.num_classes == 6 and tiny_train_data.num_classes == 2
    labels = [class_data.dataset.records[int(i)].label for i in class_data.positions]
    np.testing.assert_array_equal(class_data.targets, [int(label) for label in labels])
    np.testing.assert_array_equal(tiny_train_data.targets, tiny_train_data.buckets)


@pytest.mark.parametrize("name", ["erm", "irm", "fish", "lisa", "groupdro", "coral"])
def test_every_supervised_algorithm_learns_one_logit_per_class(name, class_data):
    torch.manual_seed(0)
    algorithm = get(name)(EncoderConfig(16), None, num_envs=6, total_steps=2, seed=0,
                          num_classes=class_data.num_classes, augment="style")
    assert algorithm.classifier.out_features == 6
    logs = algorithm.update(steps(class_data, 1)[0])
    assert all(math.isfinite(v) for v in logs.values())
    assert algorithm.predict(torch.rand(3, 3, 16, 16)).shape == (3, 6)
    assert algorithm.constructor_args()["num_classes"] == 6
    assert algorithm.constructor_args()["augment"] == "style"


def test_augmented_updates_are_deterministic_for_a_seed(class_data):
    def run():
        torch.manual_seed(0)
        algorithm = get("erm")(EncoderConfig(16), None, num_envs=6, total_steps=2, seed=1,
                               num_classes=6, augment="style")
        for batch in steps(class_data, 2):
            algorithm.update(batch)
        return algorithm.classifier.weight.detach().clone()
    assert torch.equal(run(), run())


def test_scheduled_lr_warms_up_then_follows_a_half_cosine():
    assert scheduled_lr(7, 100, 1e-3) == 1e-3                       # constant
    values = [scheduled_lr(s, 100, 1.0, "cosine", 0.1) for s in range(100)]
    assert values[0] == pytest.approx(0.1) and values[9] == pytest.approx(1.0)
    assert values[10] == pytest.approx(1.0)
    assert values[55] == pytest.approx(0.5, abs=0.02) and values[-1] < 0.001
    assert all(a >= b for a, b in itertools.pairwise(values[10:]))


def test_the_schedule_sets_the_optimizer_learning_rate(tiny_train_data):
    algorithm = get("erm")(EncoderConfig(16), {"schedule": "cosine", "warmup_fraction": 0.5},
                           num_envs=6, total_steps=4, seed=0)
    seen = []
    for batch in steps(tiny_train_data, 3):
        algorithm.update(batch)
        seen.append(algorithm.optimizer.param_groups[0]["lr"])
    lr = algorithm.hparams.lr
    assert seen == pytest.approx([lr / 2, lr, lr])


def test_knn_accuracy_votes_among_several_classes():
    reference = torch.tensor([[1.0, 0, 0], [0.9, 0.1, 0], [0, 1.0, 0], [0, 0, 1.0]])
    query = torch.tensor([[1.0, 0.05, 0], [0, 0.1, 1.0]])
    assert knn_accuracy(reference, np.array([0, 0, 1, 2]), query, np.array([0, 2]), k=1) == 1.0
    assert knn_accuracy(reference, np.array([0, 0, 1, 2]), query, np.array([1, 2]), k=1) == 0.5


def test_train_with_class_task_and_held_out_camera_and_class(tiny_photodigits, tmp_path):
    run_dir = train(tiny_config(tiny_photodigits, tmp_path / "run", epochs=1, task="class",
                                augment="style", exclude_envs=("cam-grass",),
                                exclude_labels=("4",)), progress=False)
    run = read_run(run_dir)
    assert "cam-grass" not in run["train_envs"] and len(run["train_envs"]) == 5
    assert run["classes"] == ["0", "1", "2", "3", "5"]
    assert run["config"]["task"] == "class" and run["config"]["exclude_envs"] == ["cam-grass"]
    assert (run_dir / "encoder.onnx").is_file()


def test_the_identity_names_every_setting_at_its_default_too(tiny_photodigits, tmp_path):
    identity = tiny_config(tiny_photodigits, tmp_path).identity()
    assert {"task", "augment", "aux", "exclude_envs", "exclude_labels"} <= set(identity)
    assert identity["task"] == "bucket" and identity["exclude_envs"] == []


def test_holding_out_an_unknown_camera_is_an_error(tiny_photodigits):
    with pytest.raises(DatasetError, match="cam-nowhere"):
        load_folder(tiny_photodigits).without(envs=["cam-nowhere"])


def test_rotation_views_turn_each_image_by_its_target():
    from envad.training.algorithms.base import rotated_views

    x = torch.rand(8, 3, 6, 6)
    turned, turns = rotated_views(x, torch.Generator().manual_seed(0))
    for image, out, k in zip(x, turned, turns.tolist(), strict=True):
        assert torch.equal(out, torch.rot90(image, k, dims=(1, 2)))
    assert len(set(turns.tolist())) > 1


@pytest.mark.parametrize("name", ["erm", "groupdro", "lisa"])
def test_rotation_auxiliary_loss_trains_its_head(name, class_data):
    torch.manual_seed(0)
    algorithm = get(name)(EncoderConfig(16), None, num_envs=6, total_steps=2, seed=0,
                          num_classes=6, aux="rotation")
    before = algorithm.rotation_head.weight.detach().clone()
    logs = algorithm.update(steps(class_data, 1)[0])
    assert logs["rotation"] > 0 and not torch.equal(before, algorithm.rotation_head.weight)


def test_fish_refuses_an_auxiliary_loss():
    with pytest.raises(ValueError, match="auxiliary"):
        get("fish")(EncoderConfig(16), None, num_envs=2, total_steps=1, aux="rotation")
