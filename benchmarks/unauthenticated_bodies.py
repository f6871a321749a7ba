"""What unauthenticated large bodies cost a server that requires a token.

`--clients` clients, each on its own connection, send one Score of `--mb` MB (below the
server's 72 MB message limit) without a token, all at once. Reported per refusal (one
JSON line each): the statuses the clients got and the server's RSS before, the highest
seen while the calls ran (sampled every 5 ms), and after 3 s idle. `current` is the
server as it is (server/interceptors.py: the refusal never receives the body);
`receive_then_refuse` is a comparator kept here, the earlier refusal, which returned a
handler of the method's own kind, so gRPC received each single request whole before the
refusal ran. Each refusal runs in a server process of its own.

    python -m benchmarks.unauthenticated_bodies --clients 16 --mb 70
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import tempfile
import threading
import time
from pathlib import Path

import grpc

from benchmarks.common import emit, log
from benchmarks.hostile_mix import channel, rss_mb
from envad.v1 import envad_pb2 as pb

TOKEN = "benchmark-token"
REFUSALS = ("current", "receive_then_refuse")


def use_receive_then_refuse() -> None:
    """Make this process's server refuse as before: a handler of the method's own kind,
    whose single request gRPC receives whole before the refusal runs."""
    from envad.server import interceptors

    def refused_after_receive(handler, error):
        def refuse(behavior, streams_in, streams_out):
            def reject(request, context):
                context.abort(interceptors.status_for(error), str(error))
            return reject
        # any request but None, which gRPC takes for a parse failure
        return interceptors._rebuild(handler, refuse,
                                     deserializer=lambda parse: (lambda data: True))
    interceptors.refused_unread = refused_after_receive


def serve(work: str, refusal: str, port, stop) -> None:
    """Child process: the envad server with a token, until `stop` is set."""
    from envad.server.app import start
    from envad.server.config import load_config
    if refusal == "receive_then_refuse":
        use_receive_then_refuse()
    models = Path(work) / "models"
    models.mkdir(exist_ok=True)
    config = load_config(env={}, overrides={
        "host": "127.0.0.1", "port": 0, "data_dir": Path(work) / "data",
        "models_dir": models, "auth_token": TOKEN, "log_level": "WARNING"})
    running = start(config)
    port.value = running.port
    stop.wait()
    running.stop(1.0)


def raw(data: bytes) -> bytes:
    return data


def unauthenticated_score(address: str, body: bytes, codes: collections.Counter) -> None:
    with channel(address) as chan:
        try:
            chan.unary_unary("/envad.v1.AnomalyService/Score", request_serializer=raw,
                             response_deserializer=raw)(body, timeout=120)
            codes["OK"] += 1
        except grpc.RpcError as exc:
            codes[exc.code().name] += 1


def burst(pid: int, address: str, clients: int, body: bytes) -> dict:
    """Send the bodies at once; the server's RSS before, highest seen and after."""
    codes: collections.Counter = collections.Counter()
    before = rss_mb(pid)
    threads = [threading.Thread(target=unauthenticated_score, args=(address, body, codes))
               for _ in range(clients)]
    peak = before
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, rss_mb(pid))
        time.sleep(0.005)
    seconds = time.perf_counter() - start
    time.sleep(3)    # idle: what the server keeps
    after = rss_mb(pid)
    return {"statuses": dict(codes), "seconds": round(seconds, 2),
            "rss_mb_before": round(before), "rss_mb_peak_seen": round(peak),
            "rss_mb_after_idle": round(after),
            "rss_peak_growth_mb": round(peak - before),
            "rss_growth_mb": round(after - before)}


def measure(refusal: str, clients: int, body: bytes) -> dict:
    spawn = multiprocessing.get_context("spawn")
    port, stop = spawn.Value("i", 0), spawn.Event()
    with tempfile.TemporaryDirectory() as work:
        server = spawn.Process(target=serve, args=(work, refusal, port, stop))
        server.start()
        while not port.value:
            if not server.is_alive():
                raise RuntimeError(f"server exited with code {server.exitcode}")
            time.sleep(0.05)
        time.sleep(1)     # start-up settles
        try:
            assert server.pid is not None
            return burst(server.pid, f"127.0.0.1:{port.value}", clients, body)
        finally:
            stop.set()
            server.join(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--mb", type=float, default=70.0, help="size of each Score body")
    parser.add_argument("--refusal", choices=REFUSALS, action="append",
                        help="default: both, current first")
    args = parser.parse_args()
    image = pb.Image(data=b"\x00" * int(args.mb * 1024 * 1024), env="cam-a")
    body = pb.ScoreRequest(images=[image]).SerializeToString()
    for refusal in args.refusal or REFUSALS:
        log(f"{refusal}: {args.clients} unauthenticated Score bodies of {args.mb} MB ...")
        emit({"benchmark": "unauthenticated_bodies", "refusal": refusal,
              "clients": args.clients, "body_mb": round(len(body) / 2**20, 1),
              **measure(refusal, args.clients, body)})


if __name__ == "__main__":
    main()
