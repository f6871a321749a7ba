"""The client's channels (client/channels.py): the target of several addresses, TLS
over them, gRPC's round robin over real servers, and gRPC's retries carrying a scoring
loop through the kill -9 of one of two `envad serve` processes."""

from __future__ import annotations

import json
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from envad.client import EnvadClient, RetryPolicy
from envad.client.channels import GRPC_MAX_ATTEMPTS, channel_target, service_config
from envad.client.retry import NO_RETRY
from envad.errors import EnvadError, InvalidInput, Unavailable
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import (
    InProcessServer,
    ServerHandle,
    fit_normal_rows,
    models_dir_in,
    score_calls,
    self_signed_certificate,
)
from tiny_encoder import synthetic_images

#: training rows of each replica (fewer than a real fit takes: allowed for the test)
FIT_ROWS = 40
SCORE_CALLS = 24


def test_one_address_is_the_target_as_today() -> None:
    assert channel_target(["scoring.internal:50051"]) == "scoring.internal:50051"
    assert channel_target(["unix:/run/envad.sock"]) == "unix:/run/envad.sock"


def test_several_addresses_are_one_ip_list_with_names_resolved() -> None:
    assert channel_target(["10.0.0.5:50051", "10.0.0.6:7000"]) == (
        "ipv4:10.0.0.5:50051,10.0.0.6:7000")
    assert channel_target(["localhost:1", "127.0.0.1:2", "127.0.0.1:2"]) == (
        "ipv4:127.0.0.1:1,127.0.0.1:2")
    assert channel_target(["[::1]:1", "[fd00::5]:2"]) == "ipv6:[::1]:1,[fd00::5]:2"


def test_a_list_that_mixes_families_or_names_nothing_is_refused() -> None:
    with pytest.raises(InvalidInput, match="one family"):
        channel_target(["10.0.0.5:1", "[::1]:2"])
    with pytest.raises(Unavailable, match="cannot resolve 'no-such-host.invalid'"):
        channel_target(["10.0.0.5:1", "no-such-host.invalid:2"])


def test_the_service_config_balances_and_retries_only_idempotent_calls() -> None:
    policy = RetryPolicy(max_attempts=9, initial_backoff=0.1, max_backoff=2.0, multiplier=3)
    config = json.loads(service_config(policy))
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    (method_config,) = config["methodConfig"]
    assert method_config["retryPolicy"] == {
        "maxAttempts": GRPC_MAX_ATTEMPTS, "initialBackoff": "0.100s", "maxBackoff": "2.000s",
        "backoffMultiplier": 3, "retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}
    methods = {name["method"] for name in method_config["name"]}
    assert {"Score", "ScoreStream", "Search", "Export", "GetInfo", "Check"} <= methods
    assert not methods & {"Ingest", "Fit", "SetLabel", "ActivateModel", "ResetCameraStats"}
    assert "methodConfig" not in json.loads(service_config(NO_RETRY))


@pytest.fixture
def tls_health_servers(tmp_path) -> Iterator[tuple[list[int], bytes]]:
    """Two TLS servers of gRPC's health service on 127.0.0.1 (their ports), with a
    certificate (returned) for the names localhost and scoring.test, not for the IP."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    key, cert = self_signed_certificate(tmp_path, "DNS:localhost,DNS:scoring.test")
    credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
    servers, ports = [], []
    for _ in range(2):
        server = grpc.server(ThreadPoolExecutor(2))
        health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
        ports.append(server.add_secure_port("127.0.0.1:0", credentials))
        server.start()
        servers.append(server)
    yield ports, cert.read_bytes()
    for server in servers:
        server.stop(None)


def test_tls_over_a_list_checks_the_first_name_or_the_server_name(tls_health_servers) -> None:
    (one, two), cert = tls_health_servers
    with EnvadClient(f"localhost:{one},localhost:{two}", tls=True, root_certificates=cert,
                     timeout=10) as client:
        assert [client.health() for _ in range(4)] == ["SERVING"] * 4
    by_ip = f"127.0.0.1:{one},127.0.0.1:{two}"
    with EnvadClient(by_ip, tls=True, root_certificates=cert, server_name="scoring.test",
                     timeout=10) as client:
        assert client.health() == "SERVING"
    with EnvadClient(by_ip, tls=True, root_certificates=cert, retry=NO_RETRY) as client, \
            pytest.raises(Unavailable):
        client.health()         # the certificate names no IP address


def _start_fitted(handles) -> None:
    """Start `handles` side by side, and fit each on FIT_ROWS normal rows."""
    def start_and_fit(handle):
        handle.start()
        fit_normal_rows(pb_grpc.AnomalyServiceStub(handle.channel()), FIT_ROWS)

    with ThreadPoolExecutor(len(handles)) as pool:
        list(pool.map(start_and_fit, handles))


@pytest.fixture(scope="module")
def replicas(tmp_path_factory, tiny_model_path) -> Iterator[list[InProcessServer]]:
    """Two fitted servers in this process, each with a store of its own."""
    roots = [tmp_path_factory.mktemp(f"replica{n}") for n in range(2)]
    servers = [InProcessServer(root / "data", models_dir_in(root, tiny_model_path))
               for root in roots]
    try:
        _start_fitted(servers)
        yield servers
    finally:
        for server in servers:
            server.stop()


def test_calls_are_spread_over_the_listed_servers(replicas) -> None:
    first, second = replicas
    before = [score_calls(server) for server in replicas]
    image = synthetic_images("normal", 1, seed=5)[0]
    # a host name in the list (localhost) is resolved into the ipv4: target
    with EnvadClient(f"localhost:{first.port},127.0.0.1:{second.port}") as client:
        for _ in range(SCORE_CALLS):
            assert client.score([image]).results[0].ok
    served = [score_calls(server) - b for server, b in zip(replicas, before, strict=True)]
    assert sum(served) == SCORE_CALLS and min(served) > 0, served


# ------------------------------------------------------------ a replica's loss


@pytest.fixture
def process_replicas(tmp_path, tiny_model_path, unused_port) -> Iterator[list[ServerHandle]]:
    """Two fitted `envad serve` processes, each with its own store; the first serves
    its metrics on `unused_port`."""
    handles = [ServerHandle(tmp_path / f"r{n}" / "data",
                            models_dir_in(tmp_path / f"r{n}", tiny_model_path),
                            extra_env={"ENVAD_METRICS_PORT": str(unused_port)} if n == 0
                            else None)
               for n in range(2)]
    try:
        _start_fitted(handles)
        yield handles
    finally:
        for handle in handles:
            handle.stop()


def metric_score_calls(port: int) -> float:
    """Score calls answered with OK, from the /metrics page on `port`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
        text = page.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == "envad_requests_total"
               and sample.labels == {"method": "Score", "code": "OK"})


class ScoringLoop:
    """Threads that score one image over and over through `client` until stopped,
    keeping every failure and counting the calls answered after `mark`."""

    def __init__(self, client: EnvadClient, threads: int = 3, limit: int = 5000) -> None:
        self.client = client
        self.image = synthetic_images("normal", 1, seed=7)[0]
        self.failures: list[EnvadError] = []
        self.after_mark = 0
        self.marked = threading.Event()
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.limit = limit          # calls per thread, so a broken client cannot hang
        self.threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        for _ in range(self.limit):
            if self.stopped.is_set():
                return
            marked = self.marked.is_set()
            try:
                self.client.score([self.image])
            except EnvadError as exc:
                with self.lock:
                    self.failures.append(exc)
                continue
            with self.lock:
                self.after_mark += marked

    def __enter__(self) -> ScoringLoop:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join()

    def wait(self, condition, polls: int = 1200) -> None:
        """Poll `condition()` until it holds or the loop's threads have ended."""
        for _ in range(polls):
            if condition() or not any(t.is_alive() for t in self.threads):
                return
            self.stopped.wait(0.05)


def test_a_replica_killed_mid_loop_fails_no_score_call(process_replicas, unused_port) -> None:
    victim, survivor = process_replicas
    with EnvadClient(f"{victim.address},{survivor.address}") as client, \
            ScoringLoop(client) as loop:
        loop.wait(lambda: metric_score_calls(unused_port) >= 10)
        assert metric_score_calls(unused_port) >= 10, "the victim got no share of the calls"
        assert victim.process is not None
        victim.process.kill()                   # SIGKILL: no drain, calls in flight break
        victim.process.wait()
        loop.marked.set()
        loop.wait(lambda: loop.after_mark >= 60)
    assert loop.failures == []
    assert loop.after_mark >= 60
