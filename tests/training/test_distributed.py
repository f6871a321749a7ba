"""Data-parallel training (`--workers N`): 2 CPU workers on gloo against one process.

The step comparisons run in float64: in float32 this tiny configuration (16 px, 2
images per camera and worker) is chaotic enough that rounding alone, the order of a
sum in batch norm, moves some batch-norm biases by a few percent within three steps,
with one process as much as with two; in float64 the two runs agree to about 1e-12,
which checks that the workers compute what one process computes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from envad.errors import InvalidInput
from envad.training import checkpoint as ckpt
from envad.training.distributed import shard_step
from envad.training.run import TrainConfig, read_run, train
from envad.training.workers import run_workers
from tiny_algorithms import build, tiny_config

STEPS = 2
#: the algorithms whose steps are compared with one process's: ERM, and one of each kind
#: of per-environment term (GroupDRO's weights, IRM's penalty)
STEPPED = ("erm", "groupdro", "irm")


def steps_worker(rank: int, name: str, data_dir: str, out: str) -> None:
    """`STEPS` float64 updates of `name` on this worker's shards (all of each step when
    no process group is running); saves parameters, buffers and logs to
    OUT/NAME-rankR.pt."""
    import torch.distributed as dist  # only inside a worker's group

    from envad.training.batches import EnvBalancedSampler, TrainData
    from envad.training.data import load_folder
    from envad.training.distributed import join

    ds = load_folder(Path(data_dir))
    data = TrainData(ds, ds.indices("train", normal_only=True), 16, ds.envs("train"))
    algorithm = build(name, data, total_steps=10)
    algorithm.place("cpu")
    algorithm.double()
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world > 1:
        join(algorithm)
    logs = []
    for step in list(EnvBalancedSampler(data.envs, 16, 4, 0).epoch(1))[:STEPS]:
        batches = [data.batch(env, rows) for env, rows in shard_step(step, rank, world)]
        logs.append(algorithm.update(batches))
    torch.save({"params": {k: v.detach().clone() for k, v in algorithm.named_parameters()},
                "buffers": {k: v.clone() for k, v in algorithm.named_buffers()},
                "logs": logs}, Path(out) / f"{name}-rank{rank}.pt")


def two_worker_checks(rank: int, data_dir: str, out: str) -> None:
    """What every test of two workers needs, in one launch (a launch spawns a process
    that imports torch): the STEPPED algorithms' steps, then every algorithm's updates."""
    for name in STEPPED:
        steps_worker(rank, name, data_dir, out)
    every_algorithm_worker(rank, data_dir, out)


@pytest.fixture(scope="module")
def launched(tiny_photodigits, tmp_path_factory) -> Path:
    """OUT with one process's steps of the STEPPED algorithms (rank 0) in OUT/one and
    two workers' steps and updates in OUT/two."""
    out = tmp_path_factory.mktemp("distributed")
    (out / "one").mkdir()
    (out / "two").mkdir()
    for name in STEPPED:
        steps_worker(0, name, str(tiny_photodigits), str(out / "one"))
    run_workers(two_worker_checks, (str(tiny_photodigits), str(out / "two")), 2, "cpu")
    return out


def _steps(launched: Path, name: str, workers: int) -> list[dict]:
    folder = launched / ("one" if workers == 1 else "two")
    return [torch.load(folder / f"{name}-rank{r}.pt") for r in range(workers)]


def _relative(a: dict, b: dict) -> float:
    """The largest relative difference of a tensor of `a` from its match in `b`."""
    return max(float((a[k].double() - b[k].double()).norm()
                     / b[k].double().norm().clamp_min(1e-12)) for k in b)


def test_two_workers_take_the_steps_of_one_process(launched):
    """ERM with the same global batch: each worker's equal shard of every camera, mean
    gradients and synchronised batch norm give one process's parameters."""
    (one,) = _steps(launched, "erm", 1)
    first, second = _steps(launched, "erm", 2)
    assert _relative(first["params"], one["params"]) < 1e-5
    assert _relative(first["buffers"], one["buffers"]) < 1e-5      # BN running statistics
    assert _relative(second["params"], first["params"]) == 0.0
    for k in range(STEPS):     # each worker's loss is its shard's; their mean is the batch's
        mean = (first["logs"][k]["loss"] + second["logs"][k]["loss"]) / 2
        assert mean == pytest.approx(one["logs"][k]["loss"], rel=1e-9)


@pytest.mark.parametrize("name, shared", [("groupdro", "worst_env_loss"),
                                          ("irm", "penalty")])
def test_per_environment_terms_are_identical_on_every_worker(name, shared, launched):
    """GroupDRO's weights follow every worker's losses and IRM's penalty squares the
    whole minibatch's gradient: both the same on both workers, and as one process's."""
    (one,) = _steps(launched, name, 1)
    first, second = _steps(launched, name, 2)
    for k in range(STEPS):
        assert first["logs"][k][shared] == second["logs"][k][shared]
        assert first["logs"][k][shared] == pytest.approx(one["logs"][k][shared], rel=1e-9)
    if name == "groupdro":
        assert torch.equal(first["buffers"]["q"], second["buffers"]["q"])
        torch.testing.assert_close(first["buffers"]["q"], one["buffers"]["q"], rtol=1e-9,
                                   atol=0)
    assert _relative(first["params"], one["params"]) < 1e-5


def test_a_checkpoint_written_by_two_workers_resumes_on_one(tiny_photodigits, tmp_path):
    run_dir = tmp_path / "run"
    train(tiny_config(tiny_photodigits, run_dir, workers=2), progress=False)
    run = read_run(run_dir)
    assert [e.get("workers") for e in run["epochs"]] == [2, 2]
    assert "workers" not in run["config"]          # how a run is computed, not what
    two = ckpt.load_checkpoint(ckpt.checkpoint_path(run_dir, 1))
    # the global state, as one process writes it: the same names, nothing per worker
    assert set(two["state"]) == {"model", "optimizer"}
    (run_dir / "checkpoint-epoch002.pt").unlink()
    (run_dir / "encoder.onnx").unlink()
    run.update(status="running", epochs=run["epochs"][:1])
    run.pop("export")
    (run_dir / "run.json").write_text(json.dumps(run))
    train(tiny_config(tiny_photodigits, run_dir), progress=False, resume=True)
    resumed = read_run(run_dir)
    assert [e.get("workers") for e in resumed["epochs"]] == [2, None]
    assert resumed["status"] == "done" and (run_dir / "encoder.onnx").is_file()
    one_worker = ckpt.load_checkpoint(ckpt.checkpoint_path(run_dir, 2))
    assert set(one_worker["state"]["model"]) == set(two["state"]["model"])


def test_a_finished_run_is_reused_with_another_worker_count(tiny_photodigits, tmp_path):
    run_dir = tmp_path / "run"
    train(tiny_config(tiny_photodigits, run_dir, epochs=1), progress=False)
    shutil.copy(run_dir / "run.json", tmp_path / "before.json")
    train(tiny_config(tiny_photodigits, run_dir, epochs=1, workers=2), progress=False)
    assert (run_dir / "run.json").read_text() == (tmp_path / "before.json").read_text()


def test_shard_step_splits_every_camera_evenly_in_rank_order():
    step = [(0, np.arange(4)), (3, np.arange(10, 14))]
    shards = [shard_step(step, rank, 2) for rank in range(2)]
    assert [env for env, _ in shards[1]] == [0, 3]
    for k, (_env, rows) in enumerate(step):
        assert np.array_equal(np.concatenate([s[k][1] for s in shards]), rows)
    with pytest.raises(ValueError, match="do not split evenly"):
        shard_step(step, 0, 3)


@pytest.mark.parametrize("workers", [0, 3])
def test_workers_must_divide_the_images_per_camera(workers, tmp_path):
    config = TrainConfig(data="x", algorithm="erm", out=tmp_path, batch_size=64,
                         envs_per_step=4, workers=workers)
    with pytest.raises(InvalidInput, match="divide the images per environment"):
        config.check()


def every_algorithm_worker(rank: int, data_dir: str, out: str) -> None:
    """Two updates of every trained algorithm but the STEPPED ones (whose steps the
    launch has taken already) on this worker's shards; saves each one's parameters and
    buffers to OUT/every-rankR.pt."""
    from envad.training.algorithms import get, names
    from envad.training.batches import EnvBalancedSampler, TrainData
    from envad.training.data import load_folder
    from envad.training.distributed import join

    ds = load_folder(Path(data_dir))
    data = TrainData(ds, ds.indices("train", normal_only=True), 16, ds.envs("train"))
    states = {}
    for name in [n for n in names() if get(n).trains and n not in STEPPED]:
        algorithm = build(name, data, total_steps=10)
        algorithm.prepare(data)
        algorithm.place("cpu")
        join(algorithm)
        for step in list(EnvBalancedSampler(data.envs, 16, 4, 0).epoch(1))[:2]:
            algorithm.update([data.batch(env, rows) for env, rows in shard_step(step, rank, 2)])
        states[name] = {k: v.detach().clone() for k, v in algorithm.state_dict().items()}
    torch.save(states, Path(out) / f"every-rank{rank}.pt")


def test_every_algorithm_keeps_its_workers_identical(launched):
    """Each trained algorithm of the registry steps on 2 workers, and both hold the same
    weights, buffers (GroupDRO's weights, EA-MoCo's positives, BN statistics) after."""
    first, second = (torch.load(launched / "two" / f"every-rank{r}.pt") for r in range(2))
    for name in STEPPED:                     # their steps, taken by the same launch
        stepped = _steps(launched, name, 2)
        first[name] = {**stepped[0]["params"], **stepped[0]["buffers"]}
        second[name] = {**stepped[1]["params"], **stepped[1]["buffers"]}
    assert set(first) == {"erm", "irm", "fish", "lisa", "groupdro", "coral", "mocov3",
                          "ea_mocov3"}
    for name, state in first.items():
        for key, value in state.items():
            assert torch.equal(value, second[name][key]), (name, key)
