"""BatchScorer behind the micro-batcher: concurrent Score requests are scored in one
encoder call, one bundle call and one neighbour search, with the scores and neighbours
each request gets when it is scored alone."""

from __future__ import annotations

from contextlib import ExitStack

import numpy as np
import pytest

from envad.records import RowFilter
from envad.server.batching import MicroBatcher
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.encoder import OnnxEncoder
from envad.server.env_stats import EnvStatistics
from envad.server.images import decode_image
from envad.server.index import VectorIndex
from envad.server.scoring import BatchScorer, ScoredRows, ScoreJob
from envad.server.store import EmbeddingStore, Row
from tiny_encoder import build_tiny_encoder, synthetic_images


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A real tiny encoder, 80 stored normal rows in LanceDB + FAISS, a fitted bundle."""
    tmp = tmp_path_factory.mktemp("scoring")
    encoder = OnnxEncoder(build_tiny_encoder(tmp / "enc.onnx"))
    pixels = np.stack([decode_image(d, 32) for d in synthetic_images("normal", 80, seed=1)])
    vectors = encoder.embed(pixels)
    store = EmbeddingStore(tmp / "lancedb", "tiny-test", encoder.dim)
    store.insert([Row(id=f"n{i}", vector=v, env=("cam-a", "cam-b")[i % 2], split="train",
                      label="anomaly" if i % 10 == 0 else "normal", sha256=f"h{i}")
                  for i, v in enumerate(vectors)])
    index = VectorIndex(encoder.dim)
    index.add_table(store.read())
    bundle = fit_bundle(vectors.astype(np.float64), FitSpec(seed=0), envs=[("cam-a", "cam-b")[i % 2]
                                                         for i in range(80)])
    return encoder, index, bundle, EnvStatistics(None, encoder.dim)


def no_score_statistics(bundle):
    """The world's bundle does not adapt scores to cameras: it keeps no statistics."""
    assert not bundle.score_adaptation.enabled
    return None


def requests(bundle) -> list[tuple[np.ndarray, ScoreJob]]:
    """Six requests of 1-3 images, normal and odd, different k, filters and exclusions."""
    out = []
    for i in range(6):
        kind = "odd" if i % 2 else "normal"
        count = 1 + i % 3
        pixels = np.stack([decode_image(d, 32)
                           for d in synthetic_images(kind, count, seed=100 + i)])
        job = ScoreJob(bundle, tuple(["cam-a", "cam-b", "cam-z"][i % 3] for _ in range(count)),
                       top_k=2 + i, neighbor_filter=RowFilter(envs=("cam-a",)) if i == 3
                       else RowFilter(), exclude_labels=("anomaly",) if i % 2 else (),
                       self_keys=tuple((f"n{j}", "") for j in range(count)) if i == 4 else None)
        out.append((pixels, job))
    return out


def assert_same(batched: ScoredRows, alone: ScoredRows) -> None:
    """Equal up to the float rounding of the detectors' matrix products over a batch of
    another size (float32 for KNN; float64 elsewhere, which calibration passes on)."""
    for name in alone.scores.raw:
        np.testing.assert_allclose(batched.scores.raw[name], alone.scores.raw[name],
                                   rtol=1e-6, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(batched.scores.calibrated[name],
                                   alone.scores.calibrated[name], rtol=0, atol=1e-12,
                                   err_msg=name)
    np.testing.assert_allclose(batched.scores.ensemble, alone.scores.ensemble, rtol=0,
                               atol=1e-12)
    assert [[n.id for n in row] for row in batched.neighbors] == \
        [[n.id for n in row] for row in alone.neighbors]


def test_concurrent_requests_share_one_batch_and_score_as_alone(world):
    encoder, index, bundle, stats = world
    scorer = BatchScorer(index, stats, no_score_statistics)
    sizes: list[int] = []
    batcher = MicroBatcher(encoder.embed, max_batch=64, max_wait_s=30.0,
                           on_batch=sizes.append, stage=scorer)
    jobs = requests(bundle)
    with ExitStack() as stack:      # six callers announce their requests, as Engine.score does
        tickets = [stack.enter_context(batcher.coming()) for _ in jobs]
        futures = [batcher.submit(pixels, job, ticket)
                   for (pixels, job), ticket in zip(jobs, tickets, strict=True)]
        batched = [f.result(30) for f in futures]
    batcher.close()
    assert sizes == [sum(len(p) for p, _ in jobs)]       # one encoder call for all six
    for (pixels, job), result in zip(jobs, batched, strict=True):
        alone = scorer([(encoder.embed(pixels), job)])[0]
        assert_same(result, alone)
        assert all(len(row) == job.top_k for row in result.neighbors)


def test_one_bundle_call_per_micro_batch(world, monkeypatch):
    encoder, index, bundle, stats = world
    calls: list[int] = []
    original = type(bundle).score

    def counting(self, X, envs=None, running=None, score_stats=None, ids=None):
        calls.append(len(X))
        return original(self, X, envs, running, score_stats, ids)

    monkeypatch.setattr(type(bundle), "score", counting)
    jobs = requests(bundle)
    BatchScorer(index, stats, no_score_statistics)([(encoder.embed(p), job) for p, job in jobs])
    assert calls == [sum(len(p) for p, _ in jobs)]


def test_evidence_rules_hold_in_a_batch(world):
    encoder, index, bundle, stats = world
    jobs = requests(bundle)
    scorer = BatchScorer(index, stats, no_score_statistics)
    results = scorer([(encoder.embed(p), job) for p, job in jobs])
    for (_, job), result in zip(jobs, results, strict=True):
        for r, row in enumerate(result.neighbors):
            if job.exclude_labels:
                assert all(n.label != "anomaly" for n in row)
            if job.self_keys is not None:
                assert job.self_keys[r][0] not in {n.id for n in row}
            if job.neighbor_filter.envs:
                assert {n.env for n in row} == {"cam-a"}


def test_a_request_split_across_micro_batches_is_reassembled(world):
    encoder, index, bundle, stats = world
    pixels = np.stack([decode_image(d, 32) for d in synthetic_images("odd", 7, seed=3)])
    job = ScoreJob(bundle, ("cam-a",) * 7, 3, RowFilter())
    scorer = BatchScorer(index, stats, no_score_statistics)
    batcher = MicroBatcher(encoder.embed, max_batch=3, max_wait_s=0.0, stage=scorer)
    parts = [batcher.submit(pixels[s:s + 3], job.rows(s, s + 3)).result(30)
             for s in range(0, 7, 3)]
    batcher.close()
    assert_same(ScoredRows.concat(parts), scorer([(encoder.embed(pixels), job)])[0])


def test_concurrent_score_calls_through_a_real_server_match_sequential_ones(fitted_server):
    """Eight clients at once (coalesced by the server) get what each gets alone, up to
    the float rounding of the detectors' matrix products over a batch of another size
    (calibration is continuous, so it passes that rounding on, never magnified)."""
    from concurrent.futures import ThreadPoolExecutor

    from envad.v1 import envad_pb2 as pb
    from envad.v1 import envad_pb2_grpc as pb_grpc

    stub = pb_grpc.AnomalyServiceStub(fitted_server.channel())
    # scores that adapt to the camera depend on what it sent before: compare without
    stub.Fit(pb.FitRequest(seed=0, score_adaptation="none"), timeout=120)
    images = synthetic_images("normal", 4, seed=40) + synthetic_images("odd", 4, seed=41)
    requests = [pb.ScoreRequest(images=[pb.Image(data=d, env="cam-a")], top_k=4)
                for d in images]

    def summary(response):
        result = response.results[0]
        return ([(s.detector, s.raw, s.calibrated) for s in result.detectors], result.ensemble,
                [n.id for n in result.neighbors])

    alone = [summary(stub.Score(r, timeout=60)) for r in requests]
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(lambda r: summary(stub.Score(r, timeout=60)), requests))
    for (scores_a, ensemble_a, ids_a), (scores_b, ensemble_b, ids_b) in zip(
            alone, together, strict=True):
        assert ids_a == ids_b and ensemble_b == pytest.approx(ensemble_a, rel=0, abs=1e-6)
        for (name_a, raw_a, cal_a), (name_b, raw_b, cal_b) in zip(scores_a, scores_b,
                                                                   strict=True):
            assert name_a == name_b and cal_b == pytest.approx(cal_a, rel=0, abs=1e-6)
            assert raw_b == pytest.approx(raw_a, rel=1e-6, abs=1e-9)


def _send_noise(stub, env: str, calls: int) -> None:
    """`calls` one-image Score calls of new content under camera `env`, 8 at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from envad.v1 import envad_pb2 as pb

    noise = [pb.ScoreRequest(images=[pb.Image(data=d, env=env)])
             for d in synthetic_images("odd", 25, seed=44)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: stub.Score(noise[i % len(noise)], timeout=60), range(calls)))


@pytest.mark.slow
def test_two_thousand_noise_score_calls_leave_another_clients_scores_bit_identical(
        fitted_server):
    """The issue's figure: 2,000 Score calls of new content under one camera's name."""
    from envad.v1 import envad_pb2 as pb
    from envad.v1 import envad_pb2_grpc as pb_grpc

    stub = pb_grpc.AnomalyServiceStub(fitted_server.channel())
    probe = pb.ScoreRequest(images=[pb.Image(data=d, env="cam-b")
                                    for d in synthetic_images("normal", 4, seed=45)])
    before = stub.Score(probe, timeout=60)
    _send_noise(stub, "cam-b", 2000)
    assert stub.Score(probe, timeout=60).results == before.results


def test_score_calls_change_no_camera_statistics_and_stored_rows_count_once(fitted_server):
    """Score is read-only: noise sent as Score calls under a camera's name, from many
    clients at once, leaves another client's scores of that camera bit-identical; the
    camera's statistics move only with rows that are stored, each counted once however
    many clients store them at once."""
    from concurrent.futures import ThreadPoolExecutor

    from envad.v1 import envad_pb2 as pb
    from envad.v1 import envad_pb2_grpc as pb_grpc

    stub = pb_grpc.AnomalyServiceStub(fitted_server.channel())
    stub.Fit(pb.FitRequest(seed=0, score_adaptation="camera:8"), timeout=120)
    probe = pb.ScoreRequest(images=[pb.Image(data=synthetic_images("normal", 1, seed=43)[0],
                                             env="cam-a")])

    def scored(request):
        result = stub.Score(request, timeout=60).results[0]
        return (result.ensemble, result.camera_weight,
                [(s.detector, s.raw, s.adapted, s.calibrated) for s in result.detectors])

    before = scored(probe)
    assert before[1] > 0      # cam-a's stored rows adapt its scores
    _send_noise(stub, "cam-a", 200)
    assert scored(probe) == before
    # an unseen camera: nothing stored, nothing adapted, whatever is scored
    busy = [pb.Image(data=d, env="cam-busy") for d in synthetic_images("odd", 9, seed=42)]
    with ThreadPoolExecutor(8) as pool:
        weights = list(pool.map(lambda image: scored(pb.ScoreRequest(images=[image]))[1],
                                busy))
    assert weights == [0.0] * 9
    # stored by eight clients at once (one image sent twice): each row counts once
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda image: stub.Ingest(iter([pb.IngestRequest(
            items=[pb.IngestItem(image=image)])]), timeout=60), busy + busy[:1]))
    assert scored(pb.ScoreRequest(images=[busy[0]]))[1] == pytest.approx(9 / 17)
