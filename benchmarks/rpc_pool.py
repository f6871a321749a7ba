"""The gRPC handlers' pool: one client after a burst of sixteen, on the standard
library's pool (the server's) and on a pool that wakes the thread idle last.

The server hands each call to a thread of its pool (server/worker_pool.py),
`concurrent.futures.ThreadPoolExecutor`, which gives a call to the thread that has
waited longest, so once a burst of concurrent calls has started all its threads, a lone
client's calls go round all of them; `RecentFirstPool` (benchmarks/recent_first_pool.py)
gives it to the thread that went idle last. Three real `envad serve` processes on copies
of one store (the default detector set fitted, as a deployment runs it): the standard
pool on a server that never saw more than one client, the standard pool after a burst of
16 clients, and the recent-first pool after the same burst. One-image Score calls at
`--size` px from 1 client (its own camera), the servers taken in turn over `--rounds`
rounds, each figure its best round; then 16 clients on the two burst servers, in turn.
Reference: the standard pool after the burst, in the same run.

    python -m benchmarks.rpc_pool --size 32 --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.common import emit, log
from benchmarks.models import build_resnet18_onnx
from benchmarks.recent_first_pool import RecentFirstPool
from benchmarks.serving import camera_jpegs, concurrent_score, store_and_fit
from envad.client.library import make_channel
from envad.client.server_process import LocalServer
from envad.v1 import envad_pb2_grpc as pb_grpc

STANDARD = "standard library (ThreadPoolExecutor)"
RECENT_FIRST = "envad (RecentFirstPool)"
BURST_CLIENTS = 16
SERVE_RECENT_FIRST = "serve-with-recent-first-pool"


class RecentFirstServer(LocalServer):
    """`envad serve` with `RecentFirstPool` in place of the standard library's pool."""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "benchmarks.rpc_pool", SERVE_RECENT_FIRST,
                *self.serve_args()]


def serve_with_recent_first_pool(argv: list[str]) -> int:
    import envad.server.app as app
    from envad.client.cli import main

    app.HandlerPool = RecentFirstPool       # type: ignore[misc,assignment]
    return main(argv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--fit-rows", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envad-rpc-pool-") as tmp:
        models, prepared = Path(tmp) / "models", Path(tmp) / "prepared"
        build_resnet18_onnx(args.size, models / f"resnet18-{args.size}.onnx")
        images = camera_jpegs(args.fit_rows, 640, 480, seed=args.size)
        store_and_fit(models, prepared, images)
        sides = [(STANDARD, False, LocalServer), (STANDARD, True, LocalServer),
                 (RECENT_FIRST, True, RecentFirstServer)]
        servers, stubs = [], []
        try:
            for n, (_, _, kind) in enumerate(sides):
                data = Path(tmp) / f"data-{n}"
                shutil.copytree(prepared, data)
                servers.append(kind(data, models).start())
                channel = make_channel(servers[-1].address)
                stubs.append(pb_grpc.AnomalyServiceStub(channel))
            for (pool, burst, _), stub in zip(sides, stubs, strict=True):
                concurrent_score(stub, images, 1, 1, 1.0)          # warm-up
                if burst:
                    log(f"{pool}: a burst of {BURST_CLIENTS} clients ...")
                    concurrent_score(stub, images, 1, BURST_CLIENTS, args.seconds)
            one = [0.0] * len(sides)
            sixteen = [0.0] * len(sides)
            for round_ in range(args.rounds):
                log(f"round {round_ + 1}: one client on each server ...")
                for i, stub in enumerate(stubs):
                    one[i] = max(one[i], concurrent_score(stub, images, 1, 1, args.seconds))
            for round_ in range(args.rounds):
                log(f"round {round_ + 1}: {BURST_CLIENTS} clients on the burst servers ...")
                for i, stub in enumerate(stubs):
                    if sides[i][1]:
                        sixteen[i] = max(sixteen[i], concurrent_score(
                            stub, images, 1, BURST_CLIENTS, args.seconds))
        finally:
            for server in servers:
                server.stop()
    reference = 1                           # the standard pool after the burst
    for i, (pool, burst, _) in enumerate(sides):
        record = {"benchmark": "rpc_pool", "size": args.size, "pool": pool,
                  "after_burst": burst, "rounds": args.rounds,
                  "seconds_per_round": args.seconds,
                  "one_client_images_per_s": one[i],
                  "one_client_ms": 1000 / one[i],
                  "ratio_one_client_over_standard_after_burst": one[i] / one[reference]}
        if burst:
            record |= {"sixteen_clients_images_per_s": sixteen[i],
                       "ratio_sixteen_clients_over_standard": sixteen[i] / sixteen[reference]}
        emit(record)


if __name__ == "__main__":
    if sys.argv[1:2] == [SERVE_RECENT_FIRST]:
        sys.exit(serve_with_recent_first_pool(sys.argv[2:]))
    main()
