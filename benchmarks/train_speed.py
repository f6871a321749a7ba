"""Training speed per algorithm and image size: images/s on real PhotoDigits batches.

One JSON line per (algorithm, size): images per second of `update()` (env-balanced
batches, default hyperparameters; the best of several round-robin rounds, since the
machine may be shared), its ratio to ERM measured in the same run, the FLOPs
of one update (torch's FlopCounterMode) and the achieved GFLOP/s as a fraction of this
machine's float32 GEMM rate. EA-MoCo's one-off preparation (diffusion autoencoder +
positive mining) is timed separately with `--ae-steps` autoencoder steps. Every algorithm
is placed as `envad train` places it (channels-last convolution weights); ERM is also
timed with contiguous weights in the same rounds, the reference of `relative_to_contiguous`.

    nice python -m benchmarks.train_speed --sizes 32 64 --rounds 5
    python -m benchmarks.train_speed --sizes 32 64 --rounds 20 --device cuda

`--workers N` instead times each algorithm's step on N data-parallel processes
(`envad train --workers N`: every worker's shard of the same global batch, gradients
and batch norm synchronised) against the same code on one process, in the same run:
one JSON line per (algorithm, size, workers).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import emit, gemm_gflops, log

#: the reference: ERM with the contiguous weights of a plain `module.to(device)`
CONTIGUOUS_ERM = "erm (contiguous)"


def build(name: str, data, ae_steps: int, device: str, channels_last: bool = True):
    """The algorithm with default hyperparameters, prepared; returns it and its record."""
    from envad.training.algorithms import get
    from envad.training.models import EncoderConfig

    log(f"building {name} at {data.size} px")
    hparams = {"ae_steps": ae_steps} if name == "ea_mocov3" else None
    torch.manual_seed(0)
    algorithm = get(name)(EncoderConfig(data.size), hparams, num_envs=len(data.env_names),
                          total_steps=1000, seed=0)
    record = {"algorithm": name, "size": data.size,
              "layout": "channels_last" if channels_last else "contiguous"}
    started = time.perf_counter()
    algorithm.prepare(data)
    if name == "ea_mocov3":
        record["prepare_seconds"] = round(time.perf_counter() - started, 2)
        record["prepare_ae_steps"] = ae_steps
    if channels_last:
        algorithm.place(device)    # as `envad train` does: preparation on the CPU, then move
    else:
        algorithm.to(device)
    return algorithm, record


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def device_gemm_gflops(device: str, n: int = 4096, repeats: int = 10) -> float:
    """Sustained float32 matrix-product rate of the GPU (torch's default precision)."""
    a, b = (torch.randn(n, n, device=device) for _ in range(2))
    a @ b
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2.0 * n ** 3 / best / 1e9


def measure(names: list[str], data, batch_size: int, rounds: int, ae_steps: int,
            device: str = "cpu") -> list[dict]:
    """Round-robin timing: each round times one step of every algorithm; the best round
    counts, so other jobs on a shared machine disturb the ratios less."""
    from torch.utils.flop_counter import FlopCounterMode

    from envad.training.batches import EnvBalancedSampler

    sampler = EnvBalancedSampler(data.envs, batch_size, 4, seed=0)
    steps = [[data.batch(e, r, device) for e, r in step] for step in sampler.epoch(0)]
    images = sum(len(b.y) for b in steps[0])
    built = {name: build(name, data, ae_steps, device) for name in names}
    if "erm" in names:
        built[CONTIGUOUS_ERM] = build("erm", data, ae_steps, device, channels_last=False)
        names = [*names, CONTIGUOUS_ERM]
    trained = [name for name in names if built[name][0].trains]
    for name in trained:
        algorithm, record = built[name]
        with FlopCounterMode(display=False) as counter:
            algorithm.update(steps[0])                       # also the warm-up
        record["gflop_per_image"] = round(counter.get_total_flops() / images / 1e9, 3)
    best = {name: float("inf") for name in trained}
    for r in range(rounds):
        for name in trained:
            synchronize(device)
            started = time.perf_counter()
            built[name][0].update(steps[(r + 1) % len(steps)])
            synchronize(device)
            best[name] = min(best[name], time.perf_counter() - started)
    records = []
    for name in names:
        record = dict(built[name][1], batch_size=batch_size, rounds=rounds)
        if name in best:
            record["images_per_s"] = round(images / best[name], 1)
            record["achieved_gflops"] = round(record["images_per_s"] *
                                              record["gflop_per_image"], 1)
        records.append(record)
    if CONTIGUOUS_ERM in best:
        erm = next(r for r in records
                   if r["algorithm"] == "erm" and r["layout"] == "channels_last")
        erm["relative_to_contiguous"] = round(best[CONTIGUOUS_ERM] / best["erm"], 3)
    return records


def worker_rates(rank: int, root: str, size: int, names: list[str], batch_size: int,
                 rounds: int, device: str) -> dict[str, float]:
    """Images/s of each algorithm's step on this worker's shards (best of `rounds`,
    after one warm-up step), as `envad train --workers` takes them; with no process
    group, one process takes whole steps."""
    import torch.distributed as dist  # only inside a worker's group

    from envad.training.batches import EnvBalancedSampler, TrainData
    from envad.training.data import load_folder
    from envad.training.distributed import join, shard_step

    world = dist.get_world_size() if dist.is_initialized() else 1
    ds = load_folder(Path(root))
    data = TrainData(ds, ds.indices("train", normal_only=True), size, ds.envs("train"))
    steps = [[data.batch(e, r, device) for e, r in shard_step(step, rank, world)]
             for step in EnvBalancedSampler(data.envs, batch_size, 4, seed=0).epoch(0)]
    images = sum(len(b.y) for b in steps[0]) * world
    rates = {}
    for name in names:
        algorithm, _ = build(name, data, 20, device)
        if world > 1:
            join(algorithm)
        algorithm.update(steps[0])
        best = float("inf")
        for r in range(rounds):
            if world > 1:
                dist.barrier()
            synchronize(device)
            started = time.perf_counter()
            algorithm.update(steps[(r + 1) % len(steps)])
            synchronize(device)
            best = min(best, time.perf_counter() - started)
        rates[name] = round(images / best, 1)
    return rates


def compare_workers(names: list[str], root: Path, size: int, args) -> None:
    """One JSON line per algorithm and worker count (1 and `args.workers`)."""
    from envad.training.algorithms import get
    from envad.training.workers import run_workers

    trained = [n for n in names if get(n).trains]
    work = (str(root), size, trained, args.batch_size, args.rounds, args.device)
    one = worker_rates(0, *work)
    several = run_workers(worker_rates, work, args.workers, args.device)
    for name in trained:
        for workers, rate in ((1, one[name]), (args.workers, several[name])):
            emit({"benchmark": "train_speed_workers", "algorithm": name, "size": size,
                  "workers": workers, "images_per_s": rate,
                  "relative_to_one": round(rate / one[name], 3),
                  "batch_size": args.batch_size, "rounds": args.rounds,
                  "device": args.device, "cpu_count": os.cpu_count()})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--algorithms", nargs="+", default=None, help="default: all")
    parser.add_argument("--rounds", type=int, default=5,
                        help="timed steps per algorithm, round-robin; the best counts")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--ae-steps", type=int, default=20,
                        help="autoencoder steps for EA-MoCo's timed preparation")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--workers", type=int, default=1,
                        help="above 1: compare N data-parallel workers with one process")
    args = parser.parse_args(argv)

    from envad.training.algorithms import names
    from envad.training.batches import TrainData
    from envad.training.data import load_folder
    from envad.training.photodigits import generate

    gemm = gemm_gflops() if args.device == "cpu" else device_gemm_gflops(args.device)
    gpu = ({"gpu": torch.cuda.get_device_name(args.device)}
           if args.device.startswith("cuda") else {})
    log(f"float32 GEMM: {gemm:.1f} GFLOP/s, torch threads {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            root = generate(Path(tmp) / f"pd{size}", size, 0, progress=False,
                            train_per_camera=100, test_per_camera=5)
            if args.workers > 1:
                compare_workers(args.algorithms or names(), root, size, args)
                continue
            ds = load_folder(root)
            data = TrainData(ds, ds.indices("train", normal_only=True), size,
                             ds.envs("train"))
            records = measure(args.algorithms or names(), data, args.batch_size,
                              args.rounds, args.ae_steps, args.device)
            erm_rate = next((r["images_per_s"] for r in records if r["algorithm"] == "erm"
                             and r["layout"] == "channels_last"), None)
            for record in records:
                if "images_per_s" in record:
                    record["fraction_of_gemm"] = round(record["achieved_gflops"] / gemm, 3)
                    if erm_rate:
                        record["relative_to_erm"] = round(record["images_per_s"] / erm_rate,
                                                          3)
                emit({"benchmark": "train_speed", **record, "device": args.device, **gpu,
                      "gemm_gflops": round(gemm, 1),
                      "torch_threads": torch.get_num_threads()})


if __name__ == "__main__":
    main()
